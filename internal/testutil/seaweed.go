package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/internal/objstore"
)

// Seaweed is a real S3-compatible server (SeaweedFS's weed, built into bin/
// by hack/install-module-program.sh) running for a test.
type Seaweed struct {
	// Endpoint is its S3 API's URL.
	Endpoint string
	// AccessKey and SecretKey are the one identity it accepts.
	AccessKey, SecretKey string
}

// Environment is what proctor needs to reach it, as the standard AWS
// environment variables.
func (s *Seaweed) Environment() map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL_S3":   s.Endpoint,
		"AWS_ACCESS_KEY_ID":     s.AccessKey,
		"AWS_SECRET_ACCESS_KEY": s.SecretKey,
		"AWS_REGION":            "us-east-1",
	}
}

// WeedBinary is bin/weed of the repository, or the reason it cannot be used.
func WeedBinary() (string, error) {
	return repoBinary("weed", "make seaweedfs (about 6 minutes, once)")
}

// repoBinary is bin/NAME of the repository, or the reason it cannot be
// used (and how to build it).
func repoBinary(name, how string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot find the repository")
	}
	bin := filepath.Join(filepath.Dir(file), "..", "..", "bin", name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is missing (%w): build it first with %s", bin, err, how)
	}
	return bin, nil
}

// freePorts returns n ports free on 127.0.0.1 now. weed also listens on
// each port plus 10000 (gRPC), so those are checked too.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			continue
		}
		g, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		held = append(held, g)
		ports = append(ports, p)
	}
	return ports
}

// StartSeaweed starts a weed server (master, volume, filer and S3 gateway in
// one process) with its data in a temporary directory, for the rest of the
// test. It fails the test when bin/weed is missing: a real part that is
// absent must not pass for a green run.
func StartSeaweed(tb testing.TB) *Seaweed {
	tb.Helper()
	bin, err := WeedBinary()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	s := &Seaweed{AccessKey: "proctor-test", SecretKey: "proctor-test-secret-" + strconv.Itoa(os.Getpid())}
	cfg := fmt.Sprintf(`{"identities":[{"name":"proctor","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		s.AccessKey, s.SecretKey)
	cfgFile := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	// A port freePorts found free may be taken again before weed binds it
	// (other tests start servers too): weed then exits, and is started
	// again on other ports.
	for attempt := 1; ; attempt++ {
		out, err := s.start(tb, bin, filepath.Join(dir, fmt.Sprintf("run-%d", attempt)), cfgFile)
		if err == nil {
			return s
		}
		if attempt == 3 {
			tb.Fatalf("%v:\n%s", err, out)
		}
		tb.Logf("%v; starting it again", err)
	}
}

// start runs weed in dir until the test ends, and waits until it is
// ready; it returns an error (and weed's output) if weed exits first.
func (s *Seaweed) start(tb testing.TB, bin, dir, cfgFile string) ([]byte, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		tb.Fatal(err)
	}
	p := freePorts(tb, 4)
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", p[3])
	logFile := filepath.Join(dir, "weed.log")
	proc := startProcess(tb, logFile, bin, "server", "-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+strconv.Itoa(p[0]), "-volume.port="+strconv.Itoa(p[1]), "-filer", "-filer.port="+strconv.Itoa(p[2]),
		"-s3", "-s3.port="+strconv.Itoa(p[3]), "-s3.config="+cfgFile, "-volume.max=0", "-master.volumeSizeLimitMB=64")
	// Ready when a bucket can be created and written: the S3 gateway
	// answers before the filer and volume are up.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	probe := s.Store(tb, "s3://proctor-ready")
	for {
		err := probe.CreateBucket(ctx)
		if err == nil {
			err = probe.Put(ctx, "probe", []byte("ok"))
		}
		if err == nil {
			return nil, nil
		}
		select {
		case <-proc.exited:
			out, _ := os.ReadFile(logFile)
			return out, fmt.Errorf("weed exited before it was ready: %w", proc.err)
		case <-ctx.Done():
			out, _ := os.ReadFile(logFile)
			tb.Fatalf("weed was not ready in 90 s (%v):\n%s", err, out)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Store is a client of location u (s3://BUCKET/PREFIX) of the server; the
// bucket is created.
func (s *Seaweed) Store(tb testing.TB, u string) *objstore.Store {
	tb.Helper()
	loc, err := objstore.ParseURL(u)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := objstore.Open(context.Background(), loc, objstore.Options{
		Endpoint: s.Endpoint, Region: "us-east-1", AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey,
		HTTPClient: &http.Client{Timeout: 30 * time.Second},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// Bucket makes bucket name and returns a client of s3://name/prefix.
func (s *Seaweed) Bucket(tb testing.TB, name, prefix string) *objstore.Store {
	tb.Helper()
	st := s.Store(tb, "s3://"+name+"/"+prefix)
	if err := st.CreateBucket(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return st
}
