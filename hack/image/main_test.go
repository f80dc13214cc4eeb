package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testTag = "ghcr.io/proctor-dev/proctor:v0.1.0"

// fixture writes a fake binary and CA bundle into a temp dir.
func fixture(t *testing.T) (dir, bin, ca string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "proctor")
	ca = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(bin, []byte("#!/bin/true\nnot really a binary\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, bin, ca
}

func buildImage(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("run %q: %v\nstderr: %s", args, err, stderr.String())
	}
	return stdout.String()
}

// layerFiles reads the image's only layer back: headers and contents by path.
func layerFiles(t *testing.T, img v1.Image) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("got %d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hdrs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		data[h.Name] = b
	}
	return hdrs, data
}

func TestBuildProctorImage(t *testing.T) {
	dir, bin, ca := fixture(t)
	out := filepath.Join(dir, "out", "proctor.tar")
	buildImage(t, "-o", out, "-tag", testTag,
		"-file", "/proctor="+bin+":0755",
		"-entrypoint", "/proctor",
		"-user", "65532:65532",
		"-label", "org.opencontainers.image.source=https://github.com/proctor-dev/proctor",
		"-label", "org.opencontainers.image.version=v0.1.0",
		"-env", "K=V", "-workdir", "/", "-ca-bundle", ca, "-epoch", "1700000000")

	tag, err := name.NewTag(testTag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("reading %s back: %v", out, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1700000000, 0).UTC()
	c := cf.Config
	switch {
	case cf.OS != "linux":
		t.Errorf("os = %q", cf.OS)
	case cf.Architecture == "":
		t.Errorf("architecture is empty")
	case !slices.Equal(c.Entrypoint, []string{"/proctor"}):
		t.Errorf("entrypoint = %q", c.Entrypoint)
	case len(c.Cmd) != 0:
		t.Errorf("cmd = %q, want none", c.Cmd)
	case c.User != "65532:65532":
		t.Errorf("user = %q", c.User)
	case c.WorkingDir != "/":
		t.Errorf("workdir = %q", c.WorkingDir)
	case c.Labels["org.opencontainers.image.source"] != "https://github.com/proctor-dev/proctor" ||
		c.Labels["org.opencontainers.image.version"] != "v0.1.0":
		t.Errorf("labels = %v", c.Labels)
	case !cf.Created.Time.Equal(epoch):
		t.Errorf("created = %v, want %v", cf.Created.Time, epoch)
	}
	wantEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + caPath, "K=V"}
	if !slices.Equal(c.Env, wantEnv) {
		t.Errorf("env = %q, want %q", c.Env, wantEnv)
	}
	if cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 {
		t.Errorf("rootfs %v, history %v: want one layer", cf.RootFS.DiffIDs, cf.History)
	}

	hdrs, data := layerFiles(t, img)
	type want struct {
		typ      byte
		mode     int64
		uid, gid int
	}
	wants := map[string]want{
		"etc/":                              {tar.TypeDir, 0o755, 0, 0},
		"etc/passwd":                        {tar.TypeReg, 0o644, 0, 0},
		"etc/group":                         {tar.TypeReg, 0o644, 0, 0},
		"etc/ssl/":                          {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs/":                    {tar.TypeDir, 0o755, 0, 0},
		"etc/ssl/certs/ca-certificates.crt": {tar.TypeReg, 0o644, 0, 0},
		"home/":                             {tar.TypeDir, 0o755, 0, 0},
		"home/nonroot/":                     {tar.TypeDir, 0o700, 65532, 65532},
		"tmp/":                              {tar.TypeDir, 0o1777, 0, 0},
		"proctor":                           {tar.TypeReg, 0o755, 0, 0},
	}
	var names []string
	for _, h := range hdrs {
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, epoch)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner names %q:%q, want numeric only", h.Name, h.Uname, h.Gname)
		}
		w, ok := wants[h.Name]
		if !ok {
			continue
		}
		delete(wants, h.Name)
		if h.Typeflag != w.typ || h.Mode != w.mode || h.Uid != w.uid || h.Gid != w.gid {
			t.Errorf("%s: type %c mode %o owner %d:%d, want type %c mode %o owner %d:%d",
				h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, w.typ, w.mode, w.uid, w.gid)
		}
	}
	for n := range wants {
		t.Errorf("%s missing from the layer (have %q)", n, names)
	}
	if !slices.IsSorted(names) {
		t.Errorf("entries not sorted: %q", names)
	}
	if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:nonroot:/home/nonroot:") {
		t.Errorf("/etc/passwd lacks nonroot:\n%s", data["etc/passwd"])
	}
	if !strings.Contains(string(data["etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/group lacks nonroot:\n%s", data["etc/group"])
	}
	wantCA, _ := os.ReadFile(ca)
	if !bytes.Equal(data["etc/ssl/certs/ca-certificates.crt"], wantCA) {
		t.Errorf("CA bundle not copied verbatim")
	}
	wantBin, _ := os.ReadFile(bin)
	if !bytes.Equal(data["proctor"], wantBin) {
		t.Errorf("/proctor not copied verbatim")
	}
}

func TestDeterministic(t *testing.T) {
	dir, bin, ca := fixture(t)
	args := func(out string) []string {
		return []string{"-o", out, "-tag", testTag, "-tag", "proctor:dev",
			"-file", "/proctor=" + bin, "-entrypoint", "/proctor", "-user", "65532:65532",
			"-label", "b=2", "-label", "a=1", "-ca-bundle", ca}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	buildImage(t, args(a)...)
	// A different mtime on an input must not matter.
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	buildImage(t, args(b)...)
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatalf("two builds of the same inputs differ (%d vs %d bytes)", len(ab), len(bb))
	}
	tag, _ := name.NewTag("proctor:dev")
	img, err := tarball.ImageFromPath(a, &tag)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, _ := layerFiles(t, img)
	for _, h := range hdrs {
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch 0", h.Name, h.ModTime)
		}
	}
	// The source's permissions (0700) are kept when -file gives no mode.
	if i := slices.IndexFunc(hdrs, func(h *tar.Header) bool { return h.Name == "proctor" }); i < 0 || hdrs[i].Mode != 0o700 {
		t.Errorf("/proctor missing or mode not 0700")
	}

	// SOURCE_DATE_EPOCH moves every timestamp, and so the bytes.
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	c := filepath.Join(dir, "c.tar")
	buildImage(t, args(c)...)
	cb, _ := os.ReadFile(c)
	if bytes.Equal(ab, cb) {
		t.Error("SOURCE_DATE_EPOCH made no difference")
	}
}

func TestPauseImageWithoutSkeleton(t *testing.T) {
	dir, bin, _ := fixture(t)
	out := filepath.Join(dir, "pause.tar")
	buildImage(t, "-o", out, "-tag", "localhost/pause:3.10", "-skeleton=false",
		"-file", "/pause="+bin+":0755", "-entrypoint", "/pause", "-user", "65535:65535")
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, _ := layerFiles(t, img)
	if len(hdrs) != 1 || hdrs[0].Name != "pause" {
		var names []string
		for _, h := range hdrs {
			names = append(names, h.Name)
		}
		t.Errorf("layer has %q, want only pause", names)
	}
	cf, _ := img.ConfigFile()
	if !slices.Equal(cf.Config.Env, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}) {
		t.Errorf("env = %q: want no SSL_CERT_FILE without a CA bundle", cf.Config.Env)
	}
}

func TestBusyboxStyle(t *testing.T) {
	dir, bin, ca := fixture(t)
	out := filepath.Join(dir, "busybox.tar")
	buildImage(t, "-o", out, "-tag", "docker.io/library/busybox:1.35.0", "-ca-bundle", ca,
		"-file", "/bin/busybox="+bin+":0755", "-symlink", "/bin/sh=busybox", "-symlink", "/bin/cat=busybox",
		"-cmd", "sh", "-dir", "/var/spool:0750:1:2")
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if len(cf.Config.Entrypoint) != 0 || !slices.Equal(cf.Config.Cmd, []string{"sh"}) || cf.Config.User != "" {
		t.Errorf("entrypoint %q cmd %q user %q, want none, [sh], root", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	hdrs, _ := layerFiles(t, img)
	got := map[string]*tar.Header{}
	for _, h := range hdrs {
		got[h.Name] = h
	}
	if h := got["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sh = %+v, want a symlink to busybox", h)
	}
	if h := got["var/spool/"]; h == nil || h.Mode != 0o750 || h.Uid != 1 || h.Gid != 2 {
		t.Errorf("var/spool/ = %+v, want 0750 1:2", h)
	}
	if h := got["var/"]; h == nil || h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("var/ = %+v, want an implied 0755 root directory", h)
	}
}

func TestFlagErrors(t *testing.T) {
	dir, bin, ca := fixture(t)
	out := filepath.Join(dir, "x.tar")
	base := []string{"-o", out, "-tag", testTag, "-ca-bundle", ca}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tag", testTag}, "-o is required"},
		{[]string{"-o", out}, "-tag is required"},
		{append(slices.Clone(base), "-file", "proctor="+bin), "must be absolute"},
		{append(slices.Clone(base), "-file", "/proctor"), "want DEST=SRC"},
		{append(slices.Clone(base), "-file", "/p="+filepath.Join(dir, "missing")), "no such file"},
		{append(slices.Clone(base), "-file", "/p="+dir), "not a regular file"},
		{append(slices.Clone(base), "-file", "/p="+bin, "-symlink", "/p=x"), "given twice"},
		{append(slices.Clone(base), "-file", "/p="+bin, "-file", "/p/q="+bin), "not a directory"},
		{append(slices.Clone(base), "-dir", "/tmp:17777"), "octal"},
		{append(slices.Clone(base), "-dir", "/x:0755:1"), "want DEST[:MODE[:UID:GID]]"},
		{append(slices.Clone(base), "-env", "=x"), "want K=V"},
		{append(slices.Clone(base), "-label", "nolabel"), "want K=V"},
		{[]string{"-o", out, "-tag", "Not A Tag!"}, "-tag"},
		{append(slices.Clone(base), "-epoch", "yesterday"), "SOURCE_DATE_EPOCH"},
		{[]string{"-o", out, "-tag", testTag, "-ca-bundle", filepath.Join(dir, "none.crt")}, "ca-certificates"},
	} {
		err := run(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	// A skeleton entry may be replaced by a flag's.
	buildImage(t, append(slices.Clone(base), "-dir", "/tmp:0700")...)
}

func TestCheckBinary(t *testing.T) {
	_, bin, _ := fixture(t)
	if err := checkBinary(bin, "amd64"); err != nil {
		t.Errorf("a non-ELF file: %v", err)
	}
	// The host's /bin/ls is a dynamic ELF on any usual distribution.
	f, err := elf.Open("/bin/ls")
	if err != nil {
		t.Skip("no ELF /bin/ls here:", err)
	}
	dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	f.Close()
	if !dynamic {
		t.Skip("/bin/ls is static here")
	}
	err = run([]string{"-check-static", "/bin/ls"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("-check-static /bin/ls: %v, want dynamically linked", err)
	}
	err = run([]string{"-o", filepath.Join(t.TempDir(), "x.tar"), "-tag", testTag, "-skeleton=false", "-file", "/ls=/bin/ls"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("-file /ls=/bin/ls: %v, want dynamically linked", err)
	}
}

func TestTree(t *testing.T) {
	dir, _, ca := fixture(t)
	root := filepath.Join(dir, "root")
	for _, d := range []string{"usr/lib/pg/bin", "usr/share/pg"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/pg/bin/postgres"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/share/pg/postgres.bki"), []byte("bki"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../lib/pg/bin/postgres", filepath.Join(root, "usr/share/postmaster")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tree.tar")
	buildImage(t, "-o", out, "-tag", "localhost/pg:1", "-ca-bundle", ca, "-tree", "/="+root)
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, files := layerFiles(t, img)
	got := map[string]*tar.Header{}
	for _, h := range hdrs {
		got[h.Name] = h
	}
	if h := got["usr/lib/pg/bin/postgres"]; h == nil || h.Mode != 0o755 || string(files["usr/lib/pg/bin/postgres"]) != "#!/bin/sh\n" {
		t.Errorf("usr/lib/pg/bin/postgres = %+v, want the file, 0755", h)
	}
	if h := got["usr/share/pg/postgres.bki"]; h == nil || h.Mode != 0o600 {
		t.Errorf("usr/share/pg/postgres.bki = %+v, want its mode kept", h)
	}
	if h := got["usr/share/postmaster"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../lib/pg/bin/postgres" {
		t.Errorf("usr/share/postmaster = %+v, want the link as it is", h)
	}
	if h := got["etc/passwd"]; h == nil {
		t.Error("the skeleton is gone")
	}
}
