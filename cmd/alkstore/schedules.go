package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/store"
)

func (a *app) schedulesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Aliases: []string{"schedule"}, Short: "List, pause, resume, trigger and delete schedules"}
	cmd.AddCommand(listCommand(a, "list", "Every schedule with its spec, queue and next fire",
		(*store.Store).Schedules, toScheduleJSON, a.printSchedules),
		a.scheduleActionCmd("pause", "Stop a schedule's fires until resume", (*store.Schedule).Pause),
		a.scheduleActionCmd("resume", "Restart a paused schedule from its next boundary", (*store.Schedule).Resume),
		a.scheduleActionCmd("delete", "Remove a schedule", (*store.Schedule).Delete),
		&cobra.Command{
			Use:   "trigger SCHEDULE",
			Short: "Enqueue the schedule's job now, leaving its next fire as it is; prints the job id",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				st, err := a.store(cmd.Context())
				if err != nil {
					return err
				}
				id, err := st.Schedule(args[0]).Trigger(cmd.Context())
				if err != nil {
					return err
				}
				if a.json {
					return jsonLine(a.out, map[string]int64{"id": id})
				}
				fmt.Fprintln(a.out, id)
				return nil
			},
		})
	return cmd
}

func (a *app) scheduleActionCmd(verb, short string, act func(*store.Schedule, context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " SCHEDULE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := act(st.Schedule(args[0]), cmd.Context()); err != nil {
				return err
			}
			return a.done(map[string]any{"action": verb, "schedule": args[0]}, "schedule %s: %s", args[0], pastTense(verb))
		},
	}
}

func (a *app) notifyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "notify CHANNEL [PAYLOAD|-]",
		Short: "Send a notification on a channel",
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
			if err := st.Notify(cmd.Context(), args[0], payload); err != nil {
				return err
			}
			if a.json {
				return jsonLine(a.out, map[string]any{"action": "notify", "channel": args[0]})
			}
			return nil // quiet, as before
		},
	}
}

func (a *app) listenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "listen CHANNEL",
		Short: "Print a channel's notifications as they arrive, until interrupted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, err := a.store(ctx)
			if err != nil {
				return err
			}
			l, err := st.Listen(ctx, args[0])
			if err != nil {
				return err
			}
			defer l.Close()
			for {
				n, err := l.Recv(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if a.json {
					err = jsonLine(a.out, notificationJSON{Channel: n.Channel, payloadJSON: jsonPayload(n.Payload)})
				} else {
					_, err = fmt.Fprintln(a.out, preview(n.Payload, 1000))
				}
				if err != nil {
					return err
				}
			}
		},
	}
}

// printSchedules prints schedules as a table.
func (a *app) printSchedules(list []store.ScheduleInfo) error {
	now := time.Now()
	t := newTable(a.out, "SCHEDULE", "SPEC", "TZ", "QUEUE", "STATE", "NEXT FIRE", "LAST FIRED")
	for _, s := range list {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		t.row(s.Name, s.Spec, cmpOr(s.TZ, "UTC"), s.Queue, state, agoT(s.NextFireAt, now), ago(s.LastFiredAt, now))
	}
	return t.flush()
}
