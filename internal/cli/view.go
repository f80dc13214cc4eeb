package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-dev/proctor/internal/view"
)

// DefaultViewAddr is where proctor view serves unless told: this machine
// only.
const DefaultViewAddr = "127.0.0.1:8642"

func newViewCommand(s streams) *cobra.Command {
	var namespace, addr string
	cmd := &cobra.Command{
		Use:   "view SOURCE...",
		Short: "Look at runs, their samples and comparisons in a web page",
		Long: `Serve a web page of the runs given: each run's scores with their 95% intervals, cost,
tokens and errors; its samples, filtered, sorted and opened one by one; and two runs compared
sample by sample, regressions first. Every view has a URL, filters included, and exports what
it shows as CSV or JSONL. The page is served by this process, on this machine only unless
--addr says otherwise, and loads nothing from elsewhere; proctor view opens no browser.

Each SOURCE is a results directory of proctor run (or its results.jsonl), or, in the cluster
of your kubeconfig (read with your own permissions), an Evaluation (NAME or evaluation/NAME)
or a results ConfigMap (configmap/NAME), or an object store location (s3://BUCKET/PREFIX, its
latest commit, read with the AWS environment).`,
		Example: `  proctor view results/nightly
  proctor view evaluation/nightly evaluation/candidate -n evals
  proctor view s3://evals/nightly results/candidate --addr 127.0.0.1:9000`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveView(ctx, s, args, namespace, addr)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "the Evaluations' namespace (default: your kubeconfig's)")
	cmd.Flags().StringVar(&addr, "addr", DefaultViewAddr, "the address to serve the page at (port 0: any free port)")
	return cmd
}

// viewMemoryLimit is the heap proctor view asks the garbage collector to
// stay under (unless GOMEMLIMIT says otherwise): reading a run leaves much
// garbage, which would otherwise double the process's peak.
const viewMemoryLimit = 320 << 20

// serveView loads the sources and serves them until ctx ends.
func serveView(ctx context.Context, s streams, args []string, namespace, addr string) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(viewMemoryLimit)
	}
	dir, err := os.MkdirTemp("", "proctor-view-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The sources are opened in order (a bad one is named first), then
	// read at once: reading one leaves the others' serial steps room.
	srcs := make([]*resultsSource, len(args))
	for i, arg := range args {
		if srcs[i], err = openResults(ctx, arg, namespace, s.errOut); err != nil {
			return err
		}
	}
	runs := make([]*view.Run, len(args))
	defer func() {
		for _, r := range runs {
			if r != nil {
				r.Close()
			}
		}
	}()
	var g errgroup.Group
	for i, src := range srcs {
		g.Go(func() error {
			start := time.Now()
			var err error
			switch {
			case src.path != "":
				runs[i], err = view.LoadFile(strconv.Itoa(i+1), src.label, src.path, src.summary)
			case src.lines != nil:
				runs[i], err = view.LoadLines(strconv.Itoa(i+1), src.label, dir, src.summary, src.lines)
			default:
				runs[i], err = view.Load(strconv.Itoa(i+1), src.label, dir, src.summary, src.records)
			}
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			runs[i].Phase, runs[i].Reason = src.phase, src.reason
			fmt.Fprintf(s.errOut, "Read %d samples of %s in %v\n", runs[i].Samples, src.label, time.Since(start).Round(time.Millisecond))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return invalid(fmt.Errorf("--addr: %w", err))
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(s.errOut, prefix, args) }, funcr.Options{})
	srv := &http.Server{Handler: view.NewServer(runs, log), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(s.out, "Serving %d run(s) at http://%s/ (Ctrl-C stops)\n", len(runs), ln.Addr())
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
