package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// dumpableMarker is in the environment of the helper that plays a process
// holding an API key.
const dumpableMarker = "PROCTOR_TEST_KEY=sk-dumpable-7e1d"

// TestKeyHoldersHideTheirEnvironment: a child of the same user (an agent of
// proctor run) cannot read the environment of a non-dumpable parent, where
// API keys are, though it can read a dumpable one's. The processes run as an
// unprivileged user (root could read anything).
func TestKeyHoldersHideTheirEnvironment(t *testing.T) {
	bin := executableCopy(t)
	for _, tt := range []struct {
		nonDumpable bool
		want        string
	}{
		{nonDumpable: false, want: "read the key"},
		{nonDumpable: true, want: "permission denied"},
	} {
		t.Run(fmt.Sprintf("non-dumpable=%v", tt.nonDumpable), func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^TestHelperKeyHolder$")
			cmd.Env = []string{"PROCTOR_TEST_HELPER=parent", dumpableMarker, fmt.Sprintf("PROCTOR_TEST_NONDUMPABLE=%v", tt.nonDumpable)}
			if os.Getuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "child: ") || !strings.Contains(string(out), tt.want) {
				t.Errorf("the child of a parent with non-dumpable=%v: %s; want %q", tt.nonDumpable, out, tt.want)
			}
		})
	}
}

// TestHelperKeyHolder is the parent (which holds the key and maybe makes
// itself non-dumpable, then starts a child as proctor starts an agent) and the
// child (which tries to read its parent's environment) of
// TestKeyHoldersHideTheirEnvironment.
func TestHelperKeyHolder(t *testing.T) {
	switch os.Getenv("PROCTOR_TEST_HELPER") {
	case "parent":
		if os.Getenv("PROCTOR_TEST_NONDUMPABLE") == "true" {
			if err := setNonDumpable(); err != nil {
				t.Fatal(err)
			}
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		child := exec.Command(self, "-test.run=^TestHelperKeyHolder$")
		child.Env = []string{"PROCTOR_TEST_HELPER=child"}
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Run(); err != nil {
			t.Fatal(err)
		}
	case "child":
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", os.Getppid()))
		switch {
		case err != nil:
			fmt.Printf("child: %v\n", err)
		case bytes.Contains(env, []byte(dumpableMarker)):
			fmt.Println("child: read the key")
		default:
			fmt.Printf("child: read an environment without the key: %q\n", env)
		}
	default:
		t.Skip("run by TestKeyHoldersHideTheirEnvironment")
	}
}

// executableCopy copies the test binary where an unprivileged user can run it.
func executableCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "proctor-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	bin := filepath.Join(dir, "cli.test")
	out, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
