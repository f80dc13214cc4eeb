package cli

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proctor-dev/proctor/internal/cluster"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
	"github.com/proctor-dev/proctor/internal/shard"
	"github.com/proctor-dev/proctor/runner/provider"
)

// A runner's fatal error reaches the pod's termination message (which the
// controller puts in the Evaluation's status), without any secret value of the
// environment, and bounded.
func TestWriteTerminationMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(path, nil, 0o644); err != nil { // the kubelet makes the file
		t.Fatal(err)
	}
	t.Setenv("PROCTOR_API_KEY_SMALL", "sk-very-secret-123")
	t.Setenv("POD_NAME", "arith-small-0-abcde")
	writeTerminationMessage(path, errors.New("calling arith-small-0-abcde with key sk-very-secret-123: bad template"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "calling arith-small-0-abcde with key [REDACTED]: bad template"; got != want {
		t.Errorf("termination message %q, want %q", got, want)
	}

	writeTerminationMessage(path, errors.New(strings.Repeat("x", 5000)))
	if b, _ := os.ReadFile(path); len(b) != maxTerminationMessage {
		t.Errorf("a long error wrote %d bytes, want %d", len(b), maxTerminationMessage)
	}

	// Outside a pod there is no file, and none is made.
	missing := filepath.Join(t.TempDir(), "none")
	writeTerminationMessage(missing, errors.New("boom"))
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a termination log was created outside a pod: %v", err)
	}
}

// The termination message loses the encoded forms of secret values too: an
// error quoting what an agent printed may hold its key reversed or in base64.
func TestScrubEnvironment(t *testing.T) {
	const key = "sk-very-secret-123"
	env := []string{"PROCTOR_API_KEY_SMALL=" + key, "POD_NAME=arith-small-0-abcde", "SHORT=abc", "BROKEN"}
	tests := []struct{ name, msg, want string }{
		{"plain", "key " + key, "key [REDACTED]"},
		{"base64", "key " + base64.StdEncoding.EncodeToString([]byte(key)), "key [REDACTED]"},
		{"hex", "key " + hex.EncodeToString([]byte(key)), "key [REDACTED]"},
		{"reversed", "key 321-terces-yrev-ks", "key [REDACTED]"},
		{"safe variable kept", "pod arith-small-0-abcde", "pod arith-small-0-abcde"},
		{"short value kept", "abc", "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, scrubEnvironment(tt.msg, env)); diff != "" {
				t.Errorf("scrubEnvironment(%q) (-want +got):\n%s", tt.msg, diff)
			}
		})
	}
}

// runInPod writes the error it returns: a configuration error (exit 2) says
// what is wrong in the pod's termination message.
func TestRunInPodWritesItsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := terminationLog
	terminationLog = path
	t.Cleanup(func() { terminationLog = old })
	var out, errOut strings.Builder
	err := runInPod(streams{out: &out, errOut: &errOut}, shard.Options{Namespace: "ns", Evaluation: "e"}, nil)
	if err == nil {
		t.Fatal("runInPod without --run succeeded")
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "--run") {
		t.Errorf("termination message %q does not say what is wrong", b)
	}
}

// The exit code of a pod tells the Job whether to retry: an agent executor
// that cannot be reached is retried (1) even when it showed while compiling,
// which fails for good (2) otherwise.
func TestPodExitCodes(t *testing.T) {
	gone := &provider.UnavailableError{Err: errors.New("agent executor at /run/proctor/agent.sock: connection refused")}
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{kube.ErrObsolete, exitOK},
		{errors.New("saving records: conflict"), exitFailed},
		{&shard.InvalidError{Err: errors.New("spec.models[0].agent.command[0]: bad template")}, exitInvalid},
		{gone, exitFailed},
		{&shard.InvalidError{Err: fmt.Errorf("spec.models[0].agent: %w", gone)}, exitFailed},
		{&shard.RetriesUsedError{Shard: cluster.Shard{Model: "m", Dataset: "d", Index: 3, Start: 30, End: 40}, Attempts: 4}, cluster.ExitRetriesUsed},
	} {
		code := exitOK
		var ee *exitError
		if err := podExit(streams{errOut: io.Discard}, tt.err); errors.As(err, &ee) {
			code = ee.code
		}
		if code != tt.want {
			t.Errorf("%v: exit code %d, want %d", tt.err, code, tt.want)
		}
	}
}
