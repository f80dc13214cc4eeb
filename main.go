// Command proctor runs LLM and agent evaluations: locally with `proctor run`, and
// on Kubernetes as an operator.
package main

import (
	"os"

	"github.com/proctor-dev/proctor/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:]))
}
