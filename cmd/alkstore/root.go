package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	dsnform "github.com/alkstore/alkstore/internal/dsn"
	"github.com/alkstore/alkstore/store"
)

// app holds the global flags and the store, opened on first use.
type app struct {
	dsn     string
	json    bool
	out     io.Writer
	errOut  io.Writer
	st      *store.Store
	migrate bool // open applies pending migrations (migrate up only)
}

func newRoot() (*cobra.Command, *app) {
	a := &app{out: os.Stdout, errOut: os.Stderr}
	root := &cobra.Command{
		Use:   "alkstore",
		Short: "Operate an alkstore database: queues, streams, schedules, notifications, the web console",
		Long: `alkstore operates an alkstore database without writing Go.

The database comes from --dsn, else $ALKSTORE_DSN, else $DATABASE_URL, in
any form the library opens: an SQLite file path, sqlite:path or file: URI,
or a postgres:// URL or key=value DSN (host=... dbname=...). Read commands
print aligned tables, or with --json one JSON object per line; write
commands say what they did on stderr, or with --json as one JSON object on
stdout. Exit codes: 0 success, 1 failure, 2 bad input, 3 not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	root.PersistentFlags().StringVar(&a.dsn, "dsn", "", "database: an SQLite path or a postgres:// URL or key=value DSN (default $ALKSTORE_DSN, else $DATABASE_URL)")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON, one object per line")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(a.migrateCmd(), a.statsCmd(), a.streamsCmd(), a.queuesCmd(), a.schedulesCmd(), a.groupsCmd(),
		a.notifyCmd(), a.listenCmd(), a.uiCmd())
	// Cobra adds help and completion when it executes, after the groups
	// below were made to refuse unknown words: `completion bogus` printed
	// completion's help and `help bogus` "Unknown help topic", both exit 0.
	// Both are added here, so completion refuses as every group does, and
	// help refuses a topic that names no command.
	root.SetHelpCommand(helpCmd(root))
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	return root, a
}

// helpCmd is cobra's help command, but a topic that names no command is
// bad input: an unknown word, in a group (`help migrate down`) or past a
// command that has no subcommands (`help queues enqueue extra`, which
// printed enqueue's help with exit 0: a topic is a command path, never a
// command's arguments).
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application.\nSimply type alkstore help [path to command] for full details.",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			switch {
			case err != nil:
				return usageError{err}
			case len(rest) > 0:
				return usageError{fmt.Errorf("unknown command %q for %q", rest[0], c.CommandPath())}
			}
			c.InitDefaultHelpFlag()
			return c.Help()
		},
	}
}

// refuseUnknownSubcommands makes every command group below root refuse a
// word that names none of its commands, as cobra's root does: an error
// naming it, exit 2 (bad input). Cobra treats a group (a command with
// subcommands and nothing to run) given an unknown word as a request for
// its help, which exited 0: `alkstore migrate down` looked like success.
// A group given no word still prints its help.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return cmd.Help()
				}
				return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
			}
		}
		refuseUnknownSubcommands(c)
	}
}

// isCobraUsage tells cobra's own argument errors (unknown command, wrong
// number of arguments) apart from failures.
func isCobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires ") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "invalid argument")
}

// resolveDSN is --dsn, else ALKSTORE_DSN, else DATABASE_URL.
func (a *app) resolveDSN() (string, error) {
	for _, d := range []string{a.dsn, os.Getenv("ALKSTORE_DSN"), os.Getenv("DATABASE_URL")} {
		if d != "" {
			return d, nil
		}
	}
	return "", badInput("no database: pass --dsn or set ALKSTORE_DSN or DATABASE_URL")
}

// store opens the store once. It never applies migrations except for
// migrate up: an operator's read must not change the schema behind the
// application's back.
func (a *app) store(ctx context.Context) (*store.Store, error) {
	if a.st != nil {
		return a.st, nil
	}
	dsn, err := a.resolveDSN()
	if err != nil {
		return nil, err
	}
	opts := []store.Option{store.WithLogger(slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if !a.migrate {
		opts = append(opts, store.WithoutMigrate())
		if kind, target := dsnform.Classify(dsn); kind == dsnform.SQLite {
			if err := noLiteFile(target); err != nil {
				return nil, err
			}
		}
	}
	st, err := store.Open(ctx, dsn, opts...)
	if err != nil {
		return nil, forOperators(err) // the store scrubs the DSN's password from its errors
	}
	a.st = st
	return st, nil
}

func (a *app) close() error {
	if a.st == nil {
		return nil
	}
	err := a.st.Close()
	a.st = nil
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// schemaError is a store's ErrSchemaVersion reworded for the CLI's user.
type schemaError struct {
	msg string
	err error
}

func (e schemaError) Error() string { return e.msg }
func (e schemaError) Unwrap() error { return e.err }

// forOperators points a CLI user whose database's schema is behind to
// alkstore migrate up, and one whose database is ahead (a newer alkstore
// migrated it) to upgrading this binary: the store's own error speaks to an
// application (open with auto-migration) or a DBA (the goose command
// line). Other errors pass unchanged.
func forOperators(err error) error {
	if !errors.Is(err, store.ErrSchemaVersion) {
		return err
	}
	msg := strings.Replace(err.Error(), "than this library (", "than this alkstore binary (", 1)
	if i := strings.Index(msg, ", newer than this alkstore binary ("); i >= 0 {
		if j := strings.Index(msg[i:], "): "); j >= 0 {
			return schemaError{msg[:i+j] + "): a newer alkstore migrated it; upgrade this binary (alkstore migrate status lists the versions it does not know)", err}
		}
	}
	for _, tail := range []string{": apply the migrations with ", ": apply it with ", ": open with auto-migration"} {
		if i := strings.Index(msg, tail); i >= 0 {
			return schemaError{msg[:i] + ": run alkstore migrate up", err}
		}
	}
	return err
}
