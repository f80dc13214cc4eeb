package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/internal/shard"
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
	if got, want := string(b), "calling arith-small-0-abcde with key [redacted]: bad template"; got != want {
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
