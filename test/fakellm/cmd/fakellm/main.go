// Command fakellm serves a fake OpenAI- and Anthropic-compatible model API, for
// trying Proctor offline and for benchmarks. See package fakellm for the rules by
// which it answers.
//
//	fakellm -addr 127.0.0.1:8080 -rpm 600 -latency 50ms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/test/fakellm"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line into a listen address and a Config.
func parseFlags(args []string, stderr io.Writer) (string, fakellm.Config, error) {
	var cfg fakellm.Config
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "`address` to listen on")
	fs.DurationVar(&cfg.Latency, "latency", 0, "latency added before each accepted answer")
	fs.DurationVar(&cfg.Jitter, "jitter", 0, "extra uniform random latency in [0, jitter)")
	fs.IntVar(&cfg.RequestsPerMinute, "rpm", 0, "requests accepted per window (0 = unlimited)")
	fs.IntVar(&cfg.InputTokensPerMinute, "itpm", 0, "input tokens accepted per window (0 = unlimited)")
	fs.IntVar(&cfg.OutputTokensPerMinute, "otpm", 0, "output tokens (max_tokens up front, the unused given back) per window, in bucket mode (0 = unlimited)")
	fs.DurationVar(&cfg.Window, "window", time.Minute, "period of the rate limits")
	fs.StringVar(&cfg.LimitMode, "limit-mode", fakellm.LimitBucket, "rate limiting: bucket (token buckets refilled continuously, as providers document) or window (lenient: a sliding log over the window)")
	fs.DurationVar(&cfg.BurstWindow, "burst-window", 0, "how much of each limit its bucket holds, as the time the limit takes to refill it (0 = window/60: a per-minute limit enforced per second)")
	fs.IntVar(&cfg.Burst, "burst", 0, "request bucket capacity in bucket mode, instead of -burst-window's")
	fs.DurationVar(&cfg.ClockOffset, "clock-offset", 0, "added to the wall-clock times the server reports (batch creation, rate-limit resets)")
	fs.BoolVar(&cfg.OmitRetryAfter, "no-retry-after", false, "send no retry-after headers with 429s")
	fs.BoolVar(&cfg.OmitRetryAfterMillis, "no-retry-after-ms", false, "send retry-after but not retry-after-ms with 429s")
	fs.Float64Var(&cfg.FailureRate, "fail-rate", 0, "fraction of accepted requests answered with an injected 5xx")
	fs.Float64Var(&cfg.DropRate, "drop-rate", 0, "fraction of requests whose connection is closed unanswered")
	fs.Float64Var(&cfg.WrongRate, "wrong-rate", 0, "fraction of arithmetic questions answered wrongly")
	fs.StringVar(&cfg.APIKey, "api-key", "", "API key clients must send (empty = none)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the random faults and jitter")
	fs.DurationVar(&cfg.BatchDelay, "batch-delay", 0, "how long a batch (either batch API) takes to process")
	fs.Float64Var(&cfg.BatchFailureRate, "batch-fail-rate", 0, "fraction of a batch's requests that fail")
	fs.Float64Var(&cfg.BatchExpireRate, "batch-expire-rate", 0, "fraction of a batch's requests that expire")
	fs.DurationVar(&cfg.BatchCancelDelay, "batch-cancel-delay", 0, "how long a batch's cancellation takes (0 = 1s)")
	if err := fs.Parse(args); err != nil {
		return "", cfg, err
	}
	if fs.NArg() > 0 {
		return "", cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return *addr, cfg, cfg.Validate()
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully.
func run(args []string, stdout, stderr io.Writer) error {
	addr, cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fakellm.New(cfg), ReadHeaderTimeout: 10 * time.Second}
	a := ln.Addr().String() // the real port when addr asked for port 0
	fmt.Fprintf(stdout, "fakellm listening on http://%s (OpenAI base URL http://%s/v1, Anthropic base URL http://%s)\n", a, a, a)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills the process at once

	// Requests still sleeping (latency, SLEEP:) get a few seconds to finish.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	return nil
}
