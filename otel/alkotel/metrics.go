package alkotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/alkstore/alkstore/store"
)

// ObserveStore registers gauges read from s.Stats at every collection
// (Stats reads indexes only and caps its counts at store.StatsCountLimit):
//
//   - alkstore.queue.jobs {job}: jobs by queue and alkstore.job.state
//     (ready, scheduled, running, dead)
//   - alkstore.queue.oldest_ready (s): how long the oldest ready job waited
//   - alkstore.consumer.lag {event}: events a stream consumer has not read
//   - alkstore.stream.headless_keys {key} and alkstore.stream.oldest_headless
//     (s): keyed streams' headless rows and the oldest one's age
//   - alkstore.horizon.lag {offset} and alkstore.horizon.waiting (s): how far
//     stream delivery trails the newest committed event (PostgreSQL; see
//     store.HorizonStats), and alkstore.horizon.holder_age (s): the age of
//     the oldest write transaction holding it back, 0 when none
//   - alkstore.group.lag {event} and alkstore.group.members {member}: a
//     consumer group's events not committed yet and its live members, by
//     stream and group (messaging.consumer.group.name), read from s.Groups
//
// Unregister the returned registration when done with s.
func (i *Instrumentation) ObserveStore(s *store.Store) (metric.Registration, error) {
	jobs, err1 := i.meter.Int64ObservableGauge(metricQueueJobs, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs by queue and state"))
	oldest, err2 := i.meter.Float64ObservableGauge(metricOldestReady, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest ready job of the queue has waited"))
	lag, err3 := i.meter.Int64ObservableGauge(metricConsumerLag, metric.WithUnit("{event}"),
		metric.WithDescription("Events a stream consumer has not read yet"))
	headless, err4 := i.meter.Int64ObservableGauge(metricHeadless, metric.WithUnit("{key}"),
		metric.WithDescription("Headless keys of a keyed stream"))
	headlessAge, err5 := i.meter.Float64ObservableGauge(metricHeadlessAge, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest headless key has gone unused"))
	hzLag, err6 := i.meter.Int64ObservableGauge(metricHorizonLag, metric.WithUnit("{offset}"),
		metric.WithDescription("Committed offsets above the settled horizon: events stream delivery holds back"))
	hzWait, err7 := i.meter.Float64ObservableGauge(metricHorizonWait, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest committed event above the settled horizon has waited"))
	hzHolder, err8 := i.meter.Float64ObservableGauge(metricHorizonStall, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest write transaction holding the settled horizon back; 0 when none"))
	gLag, err9 := i.meter.Int64ObservableGauge(metricGroupLag, metric.WithUnit("{event}"),
		metric.WithDescription("Events of a consumer group's stream its members have not committed yet"))
	gMembers, err10 := i.meter.Int64ObservableGauge(metricGroupMembers, metric.WithUnit("{member}"),
		metric.WithDescription("Live members of a consumer group"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10); err != nil {
		return nil, err
	}
	sys := KeySystem.String(System)
	return i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := s.Stats(ctx)
		if err != nil {
			return err
		}
		for _, q := range st.Queues {
			dest := KeyDestination.String(q.Queue)
			for state, n := range map[string]int64{"ready": q.Ready, "scheduled": q.Scheduled, "running": q.Running, "dead": q.Dead} {
				o.ObserveInt64(jobs, n, metric.WithAttributes(sys, dest, KeyState.String(state)))
			}
			o.ObserveFloat64(oldest, q.OldestReady.Seconds(), metric.WithAttributes(sys, dest))
		}
		for _, str := range st.Streams {
			dest := KeyDestination.String(str.Name)
			for _, c := range str.Consumers {
				o.ObserveInt64(lag, c.Lag, metric.WithAttributes(sys, dest, KeyConsumerGroup.String(c.Consumer)))
			}
			if str.Keys > 0 || str.Headless > 0 {
				o.ObserveInt64(headless, str.Headless, metric.WithAttributes(sys, dest))
				o.ObserveFloat64(headlessAge, str.OldestHeadless.Seconds(), metric.WithAttributes(sys, dest))
			}
		}
		hz := st.Horizon
		o.ObserveInt64(hzLag, hz.Lag, metric.WithAttributes(sys))
		o.ObserveFloat64(hzWait, hz.Waiting.Seconds(), metric.WithAttributes(sys))
		holder := 0.0
		attrs := []attribute.KeyValue{sys}
		if hz.Holder != nil {
			holder = hz.Holder.Age.Seconds()
		}
		o.ObserveFloat64(hzHolder, holder, metric.WithAttributes(attrs...))
		groups, err := s.Groups(ctx)
		if err != nil {
			return err
		}
		for _, g := range groups {
			at := metric.WithAttributes(sys, KeyDestination.String(g.Stream), KeyConsumerGroup.String(g.Group))
			o.ObserveInt64(gLag, g.Lag, at)
			o.ObserveInt64(gMembers, int64(len(g.Members)), at)
		}
		return nil
	}, jobs, oldest, lag, headless, headlessAge, hzLag, hzWait, hzHolder, gLag, gMembers)
}
