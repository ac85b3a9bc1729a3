package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/alkstore/alkstore/store"
)

// confirmData is the confirmation page an action shows when it was posted
// without confirm=yes (JavaScript confirms in the page and sets it; without
// JavaScript this page asks).
type confirmData struct {
	Action string
	Ask    string
	Back   string
	Fields map[string]string
}

// act runs an action once confirmed, then sends the browser back.
func (c *Console) act(w http.ResponseWriter, r *http.Request, ask string, fields []string, do func(ctx context.Context) error) {
	back := c.backTo(r.PostFormValue("back"))
	if r.PostFormValue("confirm") != "yes" {
		// The escaped path: the decoded one of queue "orders/eu" posted to
		// /queues/orders/eu/pause (404), and of queue "orders%2Feu" paused
		// "orders/eu".
		d := confirmData{Action: c.baseURL + r.URL.EscapedPath(), Ask: ask, Back: back, Fields: map[string]string{}}
		for _, f := range fields {
			d.Fields[f] = r.PostFormValue(f)
		}
		c.render(w, r, "confirm", http.StatusOK, page{Title: "Confirm", Data: d})
		return
	}
	if err := do(r.Context()); err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// backTo is where an action sends the browser once done (and what its
// confirmation page carries on): back, when it is a path of the console's,
// else the console's first page. A path starting with "//", or holding a
// backslash or an ASCII control character, is not one: browsers read
// "//host", "/\host" and "/<TAB>/host" as another site's (the WHATWG URL
// parser drops every tab and newline: attack60 F3).
func (c *Console) backTo(back string) string {
	if !strings.HasPrefix(back, c.baseURL+"/") || strings.HasPrefix(back, "//") || strings.Contains(back, "\\") ||
		strings.ContainsFunc(back, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return c.baseURL + "/"
	}
	return back
}

func (c *Console) queueAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	q := c.st.Queue(name)
	label := displayName(name)
	switch action {
	case "pause":
		c.act(w, r, "Pause queue "+label+"? Workers everywhere stop claiming its jobs.", nil, q.Pause)
	case "resume":
		c.act(w, r, "Resume queue "+label+"?", nil, q.Resume)
	case "requeue-dead":
		c.act(w, r, "Requeue every dead job of queue "+label+"?", nil, func(ctx context.Context) error {
			_, err := q.RequeueDead(ctx)
			return err
		})
	default:
		http.NotFound(w, r)
	}
}

func (c *Console) jobAction(w http.ResponseWriter, r *http.Request) {
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
	ob, isOutbox := strings.CutPrefix(j.Queue, store.OutboxQueuePrefix)
	q := c.st.Queue(j.Queue)
	what := fmt.Sprintf("job %d of %s", id, displayName(j.Queue))
	switch action := r.PathValue("action"); {
	case action == "requeue" && isOutbox:
		c.act(w, r, "Requeue "+what+"?", nil, func(ctx context.Context) error { return c.st.Outbox(ob).Requeue(ctx, id) })
	case action == "requeue":
		c.act(w, r, "Requeue "+what+"? It runs again with its attempts reset.", nil, func(ctx context.Context) error { return q.Requeue(ctx, id) })
	case action == "cancel" && !isOutbox:
		c.act(w, r, "Cancel "+what+"? A running handler is told to stop.", nil, func(ctx context.Context) error { return q.Cancel(ctx, id) })
	case action == "delete" && !isOutbox:
		c.act(w, r, "Delete "+what+"? This cannot be undone.", nil, func(ctx context.Context) error { return q.Delete(ctx, id) })
	default:
		http.NotFound(w, r)
	}
}

func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	sc := c.st.Schedule(name)
	switch r.PathValue("action") {
	case "pause":
		c.act(w, r, "Pause schedule "+name+"?", nil, sc.Pause)
	case "resume":
		c.act(w, r, "Resume schedule "+name+"? It fires from its next boundary.", nil, sc.Resume)
	case "trigger":
		c.act(w, r, "Trigger schedule "+name+" now? Its job is enqueued at once.", nil, func(ctx context.Context) error {
			_, err := sc.Trigger(ctx)
			return err
		})
	default:
		http.NotFound(w, r)
	}
}

func (c *Console) resetConsumer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	consumer := r.PostFormValue("consumer")
	off, err := strconv.ParseInt(r.PostFormValue("offset"), 10, 64)
	if err != nil || off < 0 || consumer == "" {
		c.fail(w, r, badInput{"reset needs a consumer and an offset >= 0"})
		return
	}
	c.act(w, r, fmt.Sprintf("Set consumer %s of stream %s to offset %d? Stop the consumer first, or it may save its own offset over this.", consumer, name, off),
		[]string{"consumer", "offset"}, func(ctx context.Context) error {
			st := c.st.Stream(name)
			// The library resets a consumer of any stream (one placed
			// before the first publish); an operator's typo here would
			// make a consumer of a stream nobody writes (attack59 F1).
			ok, err := st.Exists(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("stream %q: %w: no event, key, setting, consumer or consumer group of it is stored", name, store.ErrNotFound)
			}
			return st.ResetOffset(ctx, consumer, off)
		})
}
