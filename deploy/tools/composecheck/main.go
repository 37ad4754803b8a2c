// Command composecheck loads compose files the way `docker compose config` does, with the
// same library (compose-go): YAML parsing, variable interpolation, validation against the
// compose-spec JSON Schema, and the consistency checks (services, volumes and networks that
// are referenced must exist; depends_on must name services). It needs no Docker engine.
//
// Usage: composecheck FILE... ; exit 0 when every file loads, 1 when one does not.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func check(file string) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok, project %s, %d services\n", file, project.Name, len(project.Services))
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: composecheck FILE...")
		os.Exit(2)
	}
	failed := false
	for _, file := range os.Args[1:] {
		if err := check(file); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
