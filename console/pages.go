package console

import (
	"cmp"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alkstore/alkstore/store"
)

type queueRow struct {
	store.QueueInfo
	Chart template.HTML
}

type streamRow struct {
	store.StreamStats
	Chart template.HTML
}

type overviewData struct {
	At        time.Time
	Err       string
	Queues    []queueRow
	Streams   []streamRow
	Schedules []store.ScheduleInfo
	Headless  int64
	Keyed     bool
	Horizon   store.HorizonStats
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	snap, samples, _ := c.sampler.latest(r.Context())
	d := overviewData{At: snap.At, Schedules: snap.Schedules, Horizon: snap.Horizon}
	if snap.Err != nil {
		d.Err = snap.Err.Error()
	}
	now := c.opts.Clock()
	for _, q := range snap.Queues {
		d.Queues = append(d.Queues, queueRow{QueueInfo: q, Chart: queueChart(q.Name, samples, now)})
	}
	for _, s := range snap.Streams {
		d.Streams = append(d.Streams, streamRow{StreamStats: s, Chart: lagChart(s, samples, now)})
		d.Headless += s.Headless
		d.Keyed = d.Keyed || s.Keys > 0 || s.Headless > 0
	}
	c.render(w, r, "overview", http.StatusOK, page{Title: "Overview", Nav: "overview", Data: d})
}

func queueChart(name string, samples []sample, now time.Time) template.HTML {
	depth := series{Label: "depth (ready + scheduled)"}
	running := series{Label: "running"}
	finished := series{Label: "finished per minute (kept jobs)"}
	for _, s := range samples {
		if v, ok := s.Depth[name]; ok {
			depth.Points = append(depth.Points, point{s.At, float64(v)})
			running.Points = append(running.Points, point{s.At, float64(s.Running[name])})
			finished.Points = append(finished.Points, point{s.At, float64(s.Finished[name])})
		}
	}
	finished.Points = rate(finished.Points)
	return chartSVG("queue "+displayName(name)+": depth, running and finished per minute over the last hour", []series{depth, running, finished}, now)
}

func lagChart(st store.StreamStats, samples []sample, now time.Time) template.HTML {
	var ss []series
	for _, cs := range st.Consumers {
		se := series{Label: "lag of " + cs.Consumer}
		for _, s := range samples {
			if v, ok := s.Lag[st.Name+"/"+cs.Consumer]; ok {
				se.Points = append(se.Points, point{s.At, float64(v)})
			}
		}
		ss = append(ss, se)
	}
	return chartSVG("stream "+st.Name+": consumer lag over the last hour", ss, now)
}

var jobStates = []store.JobState{store.JobPending, store.JobRunning, store.JobDead, store.JobCancelled, store.JobExpired, store.JobCompleted}

type stateTab struct {
	State store.JobState
	Count int64
}

type queueData struct {
	Name   string
	Outbox string
	Stats  store.QueueStats
	State  store.JobState
	Tabs   []stateTab
	Jobs   []*store.Job
	After  int64
	Next   int64 // the next page's After; 0 for none
	Chart  template.HTML
}

const pageSize = 50

func (c *Console) queuePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	d := queueData{Name: name, State: store.JobState(cmpOr(r.URL.Query().Get("state"), string(store.JobPending)))}
	if !slices.Contains(jobStates, d.State) {
		c.fail(w, r, badInput{"unknown state " + strconv.Quote(string(d.State))})
		return
	}
	if a := r.URL.Query().Get("after"); a != "" {
		after, err := strconv.ParseInt(a, 10, 64)
		if err != nil || after < 0 {
			c.fail(w, r, badInput{"bad after: want a job id"})
			return
		}
		d.After = after
	}
	_, samples, _ := c.sampler.latest(r.Context())
	d.Chart = queueChart(name, samples, c.opts.Clock())
	if ob, ok := strings.CutPrefix(name, store.OutboxQueuePrefix); ok {
		d.Outbox = ob
		st, err := c.st.Outbox(ob).Stats(r.Context())
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.Stats = st
	} else {
		q := c.st.Queue(name)
		st, err := q.Stats(r.Context())
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.Stats = st
		jobs, err := q.Jobs(r.Context(), store.JobsOpts{State: d.State, After: d.After, Limit: pageSize + 1})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(jobs) > pageSize {
			jobs = jobs[:pageSize]
			d.Next = jobs[pageSize-1].ID
		}
		d.Jobs = jobs
	}
	s := d.Stats
	d.Tabs = []stateTab{{store.JobPending, s.Ready + s.Scheduled}, {store.JobRunning, s.Running}, {store.JobDead, s.Dead},
		{store.JobCancelled, s.Cancelled}, {store.JobExpired, s.Expired}, {store.JobCompleted, s.Completed}}
	c.render(w, r, "queue", http.StatusOK, page{Title: "Queue " + displayName(name), Nav: "queues", Data: d})
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, badInput{"bad job id"})
		return
	}
	j, err := c.st.Job(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "job", http.StatusOK, page{Title: "Job " + strconv.FormatInt(id, 10), Nav: "queues", Data: j})
}

// findJob is the search box: a job by id alone.
func (c *Console) findJob(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(strings.TrimSpace(r.URL.Query().Get("id")), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, badInput{"search a job by its id (a positive number)"})
		return
	}
	http.Redirect(w, r, c.baseURL+"/jobs/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

type streamData struct {
	Stats   store.StreamStats
	Events  []store.Event
	After   int64
	Earlier int64 // the After of the previous window; -1 for none
	Heads   []store.Head
	HeadsAt string
	NextKey string
	Chart   template.HTML
	Groups  []store.GroupStats // the stream's consumer groups
}

const eventWindow = 50

func (c *Console) streamPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	snap, samples, _ := c.sampler.latest(r.Context())
	d := streamData{Stats: store.StreamStats{Name: name}, Earlier: -1}
	for _, s := range snap.Streams {
		if s.Name == name {
			d.Stats = s
		}
	}
	d.Chart = lagChart(d.Stats, samples, c.opts.Clock())
	d.After = max(d.Stats.HeadOffset-eventWindow, 0)
	if a := r.URL.Query().Get("after"); a != "" {
		after, err := strconv.ParseInt(a, 10, 64)
		if err != nil || after < 0 {
			c.fail(w, r, badInput{"bad after: want an offset"})
			return
		}
		d.After = after
	}
	st := c.st.Stream(name)
	evs, err := st.ReadSince(r.Context(), d.After, eventWindow)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	slices.Reverse(evs) // newest first
	d.Events = evs
	if d.After > 0 {
		d.Earlier = max(d.After-eventWindow, 0)
	}
	d.HeadsAt = r.URL.Query().Get("key_after")
	if d.Stats.Keys > 0 || d.HeadsAt != "" {
		heads, err := st.Heads(r.Context(), d.HeadsAt, pageSize+1)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(heads) > pageSize {
			heads = heads[:pageSize]
			d.NextKey = heads[pageSize-1].Key
		}
		d.Heads = heads
	}
	groups, err := c.st.Groups(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, g := range groups {
		if g.Stream == name {
			d.Groups = append(d.Groups, g)
		}
	}
	c.render(w, r, "stream", http.StatusOK, page{Title: "Stream " + name, Nav: "streams", Data: d})
}

func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request) {
	list, err := c.st.Schedules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	slices.SortFunc(list, func(a, b store.ScheduleInfo) int { return cmp.Compare(a.Name, b.Name) })
	c.render(w, r, "schedules", http.StatusOK, page{Title: "Schedules", Nav: "schedules", Data: list})
}

// events streams a "change" event to the browser after each snapshot the
// sampler takes (after writes the wake feed reports); the page then
// fetches its own main part again. A comment every 15s keeps proxies
// from closing the connection.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, stop := c.sampler.subscribe()
	defer stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("retry: 2000\n\n"))
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case v := <-ch:
			if _, err := w.Write([]byte("event: change\ndata: " + strconv.FormatInt(v, 10) + "\n\n")); err != nil {
				return
			}
			fl.Flush()
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
