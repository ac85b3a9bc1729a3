package main

import (
	"time"

	"github.com/alkstore/alkstore/internal/joblimit"
	"github.com/alkstore/alkstore/store"
)

// The --json output: stable field names in snake_case, times in RFC 3339,
// durations in seconds. Documented in README.md ("Command line").

type jobJSON struct {
	ID          int64  `json:"id"`
	Queue       string `json:"queue"`
	State       string `json:"state"`
	Priority    int    `json:"priority"`
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"max_attempts"`
	// ByDeliverer: the job is an outbox message without a limit of its
	// own, whose max_attempts is the stored 2^30 that stands for its
	// deliverer's OutboxOpts.MaxAttempts (the text output's "-"), so that
	// a reader need not know the number.
	ByDeliverer    bool        `json:"max_attempts_by_deliverer,omitempty"`
	CreatedAt      time.Time   `json:"created_at"`
	RunAt          time.Time   `json:"run_at"`
	ClaimedAt      *time.Time  `json:"claimed_at,omitempty"`
	ClaimExpiresAt *time.Time  `json:"claim_expires_at,omitempty"`
	ExpiresAt      *time.Time  `json:"expires_at,omitempty"`
	FinishedAt     *time.Time  `json:"finished_at,omitempty"`
	Worker         string      `json:"worker,omitempty"`
	LastError      string      `json:"last_error,omitempty"`
	Errors         []errorJSON `json:"errors,omitempty"`
	payloadJSON
}

type errorJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

func toJobJSON(j *store.Job) jobJSON {
	out := jobJSON{ID: j.ID, Queue: j.Queue, State: string(j.State), Priority: j.Priority, Attempts: j.Attempts,
		MaxAttempts: j.MaxAttempts, ByDeliverer: joblimit.Deliverers(j), CreatedAt: j.CreatedAt, RunAt: j.RunAt, ClaimedAt: j.ClaimedAt,
		ClaimExpiresAt: j.ClaimExpiresAt, ExpiresAt: j.ExpiresAt, FinishedAt: j.FinishedAt, Worker: j.Worker,
		LastError: j.LastError, payloadJSON: jsonPayload(j.Payload)}
	for _, e := range j.Errors {
		out.Errors = append(out.Errors, errorJSON{Attempt: e.Attempt, At: e.At, Error: e.Error})
	}
	return out
}

type queueJSON struct {
	Name               string  `json:"name"`
	Outbox             string  `json:"outbox,omitempty"`
	Paused             bool    `json:"paused"`
	Ready              int64   `json:"ready"`
	Scheduled          int64   `json:"scheduled"`
	Running            int64   `json:"running"`
	Dead               int64   `json:"dead"`
	Completed          int64   `json:"completed"`
	Cancelled          int64   `json:"cancelled"`
	Expired            int64   `json:"expired"`
	OldestReadySeconds float64 `json:"oldest_ready_seconds"`
	CompletedRetention float64 `json:"completed_retention_seconds"`
	DeadRetention      float64 `json:"dead_retention_seconds"`
}

func toQueueJSON(q store.QueueInfo) queueJSON {
	s := q.Stats
	return queueJSON{Name: q.Name, Outbox: q.Outbox, Paused: q.Paused, Ready: s.Ready, Scheduled: s.Scheduled,
		Running: s.Running, Dead: s.Dead, Completed: s.Completed, Cancelled: s.Cancelled, Expired: s.Expired,
		OldestReadySeconds: s.OldestReady.Seconds(), CompletedRetention: q.Config.CompletedRetention.Seconds(),
		DeadRetention: q.Config.DeadRetention.Seconds()}
}

type consumerJSON struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Offset   int64  `json:"offset"`
	Lag      int64  `json:"lag"`
}

type streamJSON struct {
	Name                  string         `json:"name"`
	HeadOffset            int64          `json:"head_offset"`
	Events                int64          `json:"events"`
	Compacted             bool           `json:"compacted"`
	Keys                  int64          `json:"keys"`
	Headless              int64          `json:"headless"`
	OldestHeadlessSeconds float64        `json:"oldest_headless_seconds"`
	Consumers             []consumerJSON `json:"consumers"`
}

func toStreamJSON(s store.StreamStats) streamJSON {
	out := streamJSON{Name: s.Name, HeadOffset: s.HeadOffset, Events: s.Events, Compacted: s.Compacted, Keys: s.Keys,
		Headless: s.Headless, OldestHeadlessSeconds: s.OldestHeadless.Seconds(), Consumers: []consumerJSON{}}
	for _, c := range s.Consumers {
		out.Consumers = append(out.Consumers, consumerJSON{Stream: s.Name, Consumer: c.Consumer, Offset: c.Offset, Lag: c.Lag})
	}
	return out
}

type eventJSON struct {
	Offset    int64     `json:"offset"`
	Stream    string    `json:"stream"`
	Key       *string   `json:"key,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	payloadJSON
}

func toEventJSON(e store.Event) eventJSON {
	return eventJSON{Offset: e.Offset, Stream: e.Stream, Key: e.Key, CreatedAt: e.CreatedAt, payloadJSON: jsonPayload(e.Payload)}
}

type headJSON struct {
	Key       string    `json:"key"`
	Offset    int64     `json:"offset"`
	Rank      int64     `json:"rank"`
	Tombstone bool      `json:"tombstone"` // always false: Stream.Heads leaves deleted keys out; kept for --json readers (docs/cli-json.md)
	UpdatedAt time.Time `json:"updated_at"`
	payloadJSON
}

type scheduleJSON struct {
	Name        string     `json:"name"`
	Spec        string     `json:"spec"`
	TZ          string     `json:"tz"`
	Queue       string     `json:"queue"`
	Priority    int        `json:"priority"`
	MaxAttempts int        `json:"max_attempts"`
	NextFireAt  time.Time  `json:"next_fire_at"`
	Paused      bool       `json:"paused"`
	LastFiredAt *time.Time `json:"last_fired_at,omitempty"`
	payloadJSON
}

func toScheduleJSON(s store.ScheduleInfo) scheduleJSON {
	return scheduleJSON{Name: s.Name, Spec: s.Spec, TZ: s.TZ, Queue: s.Queue, Priority: s.Priority, MaxAttempts: s.MaxAttempts,
		NextFireAt: s.NextFireAt, Paused: s.Paused, LastFiredAt: s.LastFiredAt, payloadJSON: jsonPayload(s.Payload)}
}

type notificationJSON struct {
	Channel string `json:"channel"`
	payloadJSON
}
