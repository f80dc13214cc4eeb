package testutil

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Prometheus is a real Prometheus (built into bin/ by
// hack/install-module-program.sh) running for a test.
type Prometheus struct {
	// URL is its HTTP API's.
	URL string
}

// StartPrometheus starts Prometheus with config (prometheus.yml) for the
// rest of the test. It fails the test when bin/prometheus is missing.
func StartPrometheus(tb testing.TB, config string) *Prometheus {
	tb.Helper()
	bin, err := repoBinary("prometheus", "make prometheus (a few minutes, once)")
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		port := freePorts(tb, 1)[0]
		p := &Prometheus{URL: "http://127.0.0.1:" + strconv.Itoa(port)}
		logFile := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt))
		// New targets (a test's pods) are taken up every second rather than
		// every 5 s, so that a pod living seconds is scraped before it ends.
		proc := startProcess(tb, logFile, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--scrape.discovery-reload-interval=1s")
		tb.Cleanup(func() {
			if tb.Failed() {
				out, _ := os.ReadFile(logFile)
				tb.Logf("prometheus's log:\n%s", out)
			}
		})
		deadline := time.After(60 * time.Second)
	wait:
		for {
			if resp, err := http.Get(p.URL + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p
				}
			}
			select {
			case <-proc.exited:
				out, _ := os.ReadFile(logFile)
				if attempt == 3 {
					tb.Fatalf("prometheus exited: %v\n%s", proc.err, out)
				}
				tb.Logf("prometheus exited (%v); starting it again", proc.err)
				break wait
			case <-deadline:
				out, _ := os.ReadFile(logFile)
				tb.Fatalf("prometheus was not ready in 60 s:\n%s", out)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// Query evaluates an instant PromQL query: its samples' values by their
// labels (as name=value,... in Prometheus's order).
func (p *Prometheus) Query(expr string) (map[string]float64, error) {
	resp, err := http.Get(p.URL + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, out.Error)
	}
	res := map[string]float64{}
	for _, r := range out.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q", expr, s)
		}
		key := ""
		for _, k := range slices.Sorted(maps.Keys(r.Metric)) {
			if key != "" {
				key += ","
			}
			key += k + "=" + r.Metric[k]
		}
		res[key] = v
	}
	return res, nil
}
