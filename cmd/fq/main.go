// Command fq is FlexiQ's command-line client (docs/cli.md): quotas and usage,
// enqueue, a worker that runs a command per job, jobs and dead letters,
// triggers, periodic jobs, queue and task settings, tokens and a load
// generator. The program is package cli; this only runs it.
package main

import (
	"os"

	"github.com/flexiq/flexiq/cmd/fq/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
