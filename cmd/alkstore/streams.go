package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/store"
)

func (a *app) statsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Every stream and queue with its counts (counts stop at 10000: shown as 10000+)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			streams, err := st.Streams(cmd.Context())
			if err != nil {
				return err
			}
			queues, err := st.Queues(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				type statsJSON struct {
					Streams []streamJSON `json:"streams"`
					Queues  []queueJSON  `json:"queues"`
				}
				out := statsJSON{Streams: []streamJSON{}, Queues: []queueJSON{}}
				for _, s := range streams {
					out.Streams = append(out.Streams, toStreamJSON(s))
				}
				for _, q := range queues {
					out.Queues = append(out.Queues, toQueueJSON(q))
				}
				return jsonLine(a.out, out)
			}
			fmt.Fprintln(a.out, "STREAMS")
			if err := a.printStreams(streams); err != nil {
				return err
			}
			fmt.Fprintln(a.out, "\nQUEUES")
			return a.printQueues(queues)
		},
	}
}

func (a *app) printStreams(streams []store.StreamStats) error {
	t := newTable(a.out, "STREAM", "HEAD", "EVENTS", "CONSUMERS", "MAX LAG", "KEYS", "HEADLESS", "OLDEST HEADLESS")
	for _, s := range streams {
		var maxLag int64
		for _, c := range s.Consumers {
			maxLag = max(maxLag, c.Lag)
		}
		oldest := "-"
		if s.Headless > 0 {
			oldest = short(s.OldestHeadless)
		}
		t.row(s.Name, s.HeadOffset, count(s.Events, store.StatsCountLimit), len(s.Consumers),
			count(maxLag, store.StatsCountLimit), count(s.Keys, store.StatsCountLimit), count(s.Headless, store.StatsCountLimit), oldest)
	}
	return t.flush()
}

func (a *app) streamsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "streams", Aliases: []string{"stream"}, Short: "List, tail, publish to and rewind streams"}
	cmd.AddCommand(listCommand(a, "list", "Every stream with its head offset, events, consumers and keys",
		(*store.Store).Streams, toStreamJSON, a.printStreams), a.tailCmd(), a.consumersCmd(), a.resetCmd(), a.headsCmd(), a.publishCmd())
	return cmd
}

func (a *app) tailCmd() *cobra.Command {
	var from int64
	var end, follow bool
	var consumer string
	var limit int
	cmd := &cobra.Command{
		Use:   "tail STREAM",
		Short: "Print a stream's events from an offset, the end, or a consumer's position; --follow waits for new ones",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			set := 0
			for _, b := range []bool{cmd.Flags().Changed("from"), end, consumer != ""} {
				if b {
					set++
				}
			}
			if set > 1 {
				return badInput("use one of --from, --end and --consumer")
			}
			if from < 0 {
				return badInput("--from must not be negative")
			}
			if limit <= 0 {
				return badInput("--limit must be positive")
			}
			st, err := a.store(ctx)
			if err != nil {
				return err
			}
			stream := st.Stream(args[0])
			// A mistyped stream printed nothing and exited 0, as an idle
			// one does (attack60 F4).
			exists, err := stream.Exists(ctx)
			if err != nil {
				return err
			}
			if !exists {
				if !follow || consumer != "" {
					return streamNotFound(args[0])
				}
				// Following a stream nothing was written to yet waits for
				// its first event, as tail -F waits for a file: a consumer
				// is often started before its producer.
				fmt.Fprintf(a.errOut, "stream %q has no events yet; waiting for its first\n", args[0])
			}
			after := from
			switch {
			case end:
				// The end is the settled horizon, not the stream's head: on
				// PostgreSQL an event a transaction still open drew a lower
				// offset for commits later, below the head, and starting at
				// the head skipped it. Every event at or below the horizon
				// has committed (receivers read up to it), so starting after
				// it skips none that commits later. Offsets are the store's,
				// not the stream's, so the store's horizon is this stream's.
				hz, err := st.Horizon(ctx)
				if err != nil {
					return err
				}
				after = hz.Settled
			case consumer != "":
				if after, err = consumerOffset(ctx, stream, consumer); err != nil {
					return err
				}
			}
			return a.tail(ctx, stream, after, limit, follow)
		},
	}
	cmd.Flags().Int64Var(&from, "from", 0, "print events after this offset (0: from the first)")
	cmd.Flags().BoolVar(&end, "end", false, "start at the current end, the settled horizon (with --follow: only new events, none that commits late skipped)")
	cmd.Flags().StringVar(&consumer, "consumer", "", "start at this consumer's saved offset (it is not changed; one the stream does not have is not found, exit 3)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they commit, until interrupted")
	cmd.Flags().IntVarP(&limit, "limit", "n", 100, "without --follow: print at most this many events")
	return cmd
}

// streamNotFound is a read command's error for a stream it does not find.
func streamNotFound(name string) error {
	return fmt.Errorf("stream %q: %w", name, store.ErrNotFound)
}

// consumerOffset is consumer's saved offset in stream. A consumer the
// stream does not have is refused: Offset reads it as 0, and a mistyped
// --consumer printed the whole stream from its first event (attack60 F4).
func consumerOffset(ctx context.Context, stream *store.Stream, consumer string) (int64, error) {
	off, err := stream.Offset(ctx, consumer) // checks the name: a bad one is bad input
	if err != nil {
		return 0, err
	}
	streams, err := stream.Store().Streams(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range streams {
		if s.Name != stream.Name() {
			continue
		}
		for _, c := range s.Consumers {
			if c.Consumer == consumer {
				return off, nil
			}
		}
	}
	return 0, fmt.Errorf("consumer %q of stream %q: %w", consumer, stream.Name(), store.ErrNotFound)
}

func (a *app) tail(ctx context.Context, stream *store.Stream, after int64, limit int, follow bool) error {
	w := bufio.NewWriter(a.out)
	defer w.Flush()
	now := time.Now()
	print := func(ev store.Event) error {
		if a.json {
			return jsonLine(w, toEventJSON(ev))
		}
		key := "-"
		if ev.Key != nil {
			key = *ev.Key
		}
		_, err := fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", ev.Offset, agoT(ev.CreatedAt, now), key, preview(ev.Payload, 200))
		return err
	}
	if !follow {
		evs, err := stream.ReadSince(ctx, after, limit)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := print(ev); err != nil {
				return err
			}
		}
		if len(evs) < limit {
			return a.heldBack(ctx, stream, evs, after)
		}
		return nil
	}
	r, err := stream.Follow(ctx, after, store.SubscribeOpts{})
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		ev, ok, err := r.TryRecv(ctx)
		if err == nil && !ok {
			if err = w.Flush(); err == nil { // nothing buffered: show what we have, then wait
				ev, err = r.Recv(ctx)
				ok = err == nil
			}
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return nil // interrupted: a clean end
			}
			return err
		}
		if ok {
			now = time.Now()
			if err := print(ev); err != nil {
				return err
			}
		}
	}
}

// heldBack says on stderr when a short page of tail may have stopped at the
// settled horizon with committed events above it (PostgreSQL: a write
// transaction still running anywhere on the server may own a lower offset,
// docs/design/stream-horizon.md), so an empty or short output is not taken
// for the stream's end. Offsets are the store's: the held ones may belong
// to other streams. Only a short page pays for the look.
func (a *app) heldBack(ctx context.Context, stream *store.Stream, evs []store.Event, after int64) error {
	hz, err := stream.Store().Horizon(ctx)
	if err != nil || hz.Lag <= 0 {
		return err
	}
	last := after
	if n := len(evs); n > 0 {
		last = evs[n-1].Offset
	}
	if hz.Head <= last {
		return nil
	}
	holder := "a write transaction still running on the server"
	if h := hz.Holder; h != nil {
		holder = fmt.Sprintf("the write transaction of pid %d (database %q", h.PID, h.Database)
		if h.Age > 0 {
			holder += fmt.Sprintf(", %s old", h.Age.Round(time.Second))
		}
		holder += ")"
	}
	// Lag counts offsets, not events: those drawn by transactions still
	// open or rolled back count too (attack56b F9: one waiting event read
	// as "4 committed offsets").
	_, err = fmt.Fprintf(a.errOut, "held back: committed events above the settled horizon %d (of any stream, up to offset %d, the newest committed; %d offset(s) between, some perhaps of transactions still open or rolled back) wait until %s ends: it may own a lower offset; --follow prints them then\n",
		hz.Settled, hz.Head, hz.Lag, holder)
	return err
}

func (a *app) consumersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "consumers STREAM",
		Short: "A stream's consumers with their offsets and lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			streams, err := st.Streams(cmd.Context())
			if err != nil {
				return err
			}
			var found *store.StreamStats
			for i := range streams {
				if streams[i].Name == args[0] {
					found = &streams[i]
				}
			}
			if found == nil {
				// A name no stream can have is bad input (exit 2), as tail
				// and heads say, not "not found" (3): the library checks a
				// name before any I/O.
				var oe *store.OpError
				if _, err := st.Stream(args[0]).Offset(cmd.Context(), "alkstore"); errors.As(err, &oe) &&
					(errors.Is(err, store.ErrInvalidName) || errors.Is(err, store.ErrReservedName)) {
					return fmt.Errorf("stream %q: %w", args[0], oe.Err)
				}
				return streamNotFound(args[0])
			}
			if a.json {
				for _, c := range toStreamJSON(*found).Consumers {
					if err := jsonLine(a.out, c); err != nil {
						return err
					}
				}
				return nil
			}
			t := newTable(a.out, "CONSUMER", "OFFSET", "LAG")
			for _, c := range found.Consumers {
				t.row(c.Consumer, c.Offset, count(c.Lag, store.StatsCountLimit))
			}
			return t.flush()
		},
	}
}

func (a *app) resetCmd() *cobra.Command {
	var fresh bool
	cmd := &cobra.Command{
		Use:   "reset STREAM CONSUMER OFFSET",
		Short: "Set a consumer's offset (a rewind to replay, or a skip); stop the consumer first",
		Long: `Set a consumer's offset (a rewind to replay, or a skip); stop the consumer first.
A stream of which nothing is stored (no event, key, setting, consumer or
consumer group: a mistyped name?) is refused (exit 3) unless --new is given,
to place a consumer of a stream nothing was published to yet.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := strconv.ParseInt(args[2], 10, 64)
			if err != nil || off < 0 {
				return badInput("offset %q: want a number >= 0", args[2])
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			stream := st.Stream(args[0])
			if !fresh {
				if err := mustExist(cmd.Context(), stream, args[0]); err != nil {
					return err
				}
			}
			if err := stream.ResetOffset(cmd.Context(), args[1], off); err != nil {
				return err
			}
			return a.done(map[string]any{"action": "reset", "stream": args[0], "consumer": args[1], "offset": off},
				"consumer %s of %s now at offset %d", args[1], args[0], off)
		},
	}
	cmd.Flags().BoolVar(&fresh, "new", false, "reset a consumer of a stream of which nothing is stored yet (placed before the first publish)")
	return cmd
}

// mustExist refuses a stream of which nothing is stored: an operator's
// typo would otherwise make a consumer of a stream nobody writes
// (attack59 F1).
func mustExist(ctx context.Context, st *store.Stream, name string) error {
	ok, err := st.Exists(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("stream %q: %w: no event, key, setting, consumer or consumer group of it is stored (a mistyped name? --new resets a consumer of a stream not written yet)", name, store.ErrNotFound)
	}
	return nil
}

func (a *app) headsCmd() *cobra.Command {
	var after string
	var limit int
	cmd := &cobra.Command{
		Use:   "heads STREAM",
		Short: "A compacted stream's current value of each key, in key order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return badInput("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			stream := st.Stream(args[0])
			heads, err := stream.Heads(cmd.Context(), after, limit)
			if err != nil {
				return err
			}
			if len(heads) == 0 { // a mistyped stream, or one without keys (attack60 F4)
				exists, err := stream.Exists(cmd.Context())
				if err != nil {
					return err
				}
				if !exists {
					return streamNotFound(args[0])
				}
			}
			if a.json {
				for _, h := range heads {
					if err := jsonLine(a.out, headJSON{Key: h.Key, Offset: h.Offset, Rank: h.Rank, Tombstone: h.Payload == nil,
						UpdatedAt: h.UpdatedAt, payloadJSON: jsonPayload(h.Payload)}); err != nil {
						return err
					}
				}
				return nil
			}
			now := time.Now()
			t := newTable(a.out, "KEY", "OFFSET", "RANK", "UPDATED", "VALUE")
			for _, h := range heads {
				val := preview(h.Payload, 80)
				if h.Payload == nil {
					val = "(tombstone)"
				}
				t.row(h.Key, h.Offset, h.Rank, agoT(h.UpdatedAt, now), val)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "start after this key")
	cmd.Flags().IntVarP(&limit, "limit", "n", 100, "at most this many keys")
	return cmd
}

func (a *app) publishCmd() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "publish STREAM [PAYLOAD|-]",
		Short: "Append an event (payload from the argument, or stdin with -); prints its offset",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload, err := payloadArg(args[1:])
			if err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			var off int64
			if cmd.Flags().Changed("key") {
				off, err = st.Stream(args[0]).PublishWithKey(cmd.Context(), key, payload)
			} else {
				off, err = st.Stream(args[0]).Publish(cmd.Context(), payload)
			}
			if err != nil {
				return err
			}
			if a.json {
				return jsonLine(a.out, map[string]int64{"offset": off})
			}
			fmt.Fprintln(a.out, off)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "publish with this key (updates its compaction head)")
	return cmd
}

// payloadArg reads a payload from the argument, from stdin for "-", or
// none (empty) without an argument.
func payloadArg(args []string) ([]byte, error) {
	if len(args) == 0 {
		return []byte{}, nil
	}
	if args[0] == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, store.MaxPayloadSize+1))
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return b, nil
	}
	return []byte(args[0]), nil
}
