package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/alkstore/alkstore/store"
)

// listCommand is a read command that prints a list: with --json one object
// a line (toJSON's), else the table print makes.
func listCommand[T, J any](a *app, use, short string, read func(*store.Store, context.Context) ([]T, error),
	toJSON func(T) J, print func([]T) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			list, err := read(st, cmd.Context())
			if err != nil {
				return err
			}
			if !a.json {
				return print(list)
			}
			for _, v := range list {
				if err := jsonLine(a.out, toJSON(v)); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
