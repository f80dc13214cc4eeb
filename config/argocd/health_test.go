// Package argocd holds Argo CD's health check for Evaluations (health.lua) and
// its tests: the cases of health_test.yaml, in the format of Argo CD's
// resource_customizations/<group>/<kind>/health_test.yaml, run in gopher-lua
// (the interpreter Argo CD uses) set up as Argo CD sets it up for a health
// check of argocd-cm.
package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/proctor-dev/proctor/api/v1alpha1"
)

// healthTests is health_test.yaml, as Argo CD reads it (util/lua/health_test.go).
type healthTests struct {
	Tests []healthTest `json:"tests"`
}

type healthTest struct {
	HealthStatus healthStatus `json:"healthStatus"`
	InputPath    string       `json:"inputPath"`
}

// healthStatus is what Argo CD reads of the table the script returns
// (gitops-engine's health.HealthStatus).
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// The statuses Argo CD accepts from a script; any other is Unknown, with
// argoInvalidStatus as its message.
var argoStatuses = []string{"Unknown", "Progressing", "Suspended", "Healthy", "Degraded", "Missing"}

const argoInvalidStatus = "Lua returned an invalid health status"

// vmSetup is how Argo CD sets up its Lua VM (util/lua/lua.go, runLua). A check
// of argocd-cm runs without Lua's standard libraries unless
// resource.customizations.useOpenLibs.<group>_<kind> is true: only package,
// base and table are opened (and a safe os module holding time and date, which
// health.lua does not use, so it is left out here); no string, math or io.
type vmSetup struct {
	name        string
	useOpenLibs bool
}

var vmSetups = []vmSetup{
	{name: "default", useOpenLibs: false},
	{name: "useOpenLibs", useOpenLibs: true},
}

func readScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("health.lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readCases(t *testing.T) []healthTest {
	t.Helper()
	b, err := os.ReadFile("health_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests healthTests
	if err := yaml.UnmarshalStrict(b, &tests); err != nil {
		t.Fatalf("health_test.yaml: %v", err)
	}
	if len(tests.Tests) == 0 {
		t.Fatal("health_test.yaml has no tests")
	}
	return tests.Tests
}

// fixtureJSON reads a testdata manifest as JSON.
func fixtureJSON(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return j
}

// toLua converts an object as Argo CD does (util/lua/lua.go, decodeValue):
// objects become tables with string keys, arrays tables indexed from 1,
// numbers (float64 from JSON, int64 from a live object) LNumber, booleans
// LBool, strings LString and null LNil. Any other type is an error here
// (Argo CD would pass nil), so that a fixture cannot go wrong unseen.
func toLua(l *lua.LState, v any) (lua.LValue, error) {
	switch v := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(v), nil
	case string:
		return lua.LString(v), nil
	case float64:
		return lua.LNumber(v), nil
	case int64:
		return lua.LNumber(v), nil
	case int:
		return lua.LNumber(v), nil
	case []any:
		tbl := l.CreateTable(len(v), 0)
		for _, item := range v {
			lv, err := toLua(l, item)
			if err != nil {
				return nil, err
			}
			tbl.Append(lv)
		}
		return tbl, nil
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, item := range v {
			lv, err := toLua(l, item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			tbl.RawSetString(k, lv)
		}
		return tbl, nil
	}
	return nil, fmt.Errorf("no Lua value for %T", v)
}

// runHealth runs script with the global obj set to obj, in a fresh VM set up
// as Argo CD's, and reads the status and message of the table it returns.
func runHealth(setup vmSetup, script string, obj map[string]any) (healthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: !setup.useOpenLibs})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return healthStatus{}, fmt.Errorf("opening %s: %w", lib.name, err)
		}
	}
	// Argo CD gives a script a second.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)

	value, err := toLua(l, obj)
	if err != nil {
		return healthStatus{}, err
	}
	l.SetGlobal("obj", value)
	if err := l.DoString(script); err != nil {
		return healthStatus{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	// Argo CD encodes the table to JSON and decodes a HealthStatus of it: both
	// fields must be strings, and the message may be missing.
	var hs healthStatus
	for key, dst := range map[string]*string{"status": &hs.Status, "message": &hs.Message} {
		switch v := ret.RawGetString(key).(type) {
		case lua.LString:
			*dst = string(v)
		case *lua.LNilType:
		default:
			return healthStatus{}, fmt.Errorf("the script's %s is a %s, not a string", key, v.Type())
		}
	}
	if !slices.Contains(argoStatuses, hs.Status) {
		return healthStatus{Status: "Unknown", Message: argoInvalidStatus}, nil
	}
	return hs, nil
}

// TestHealthLua runs every case of health_test.yaml. Each fixture is given as
// Argo CD's own tests give it (YAML decoded to JSON: numbers are float64) and
// as the application controller does (a live object: integers are int64), to
// a VM without and with the standard libraries.
func TestHealthLua(t *testing.T) {
	script := readScript(t)
	for _, tc := range readCases(t) {
		t.Run(filepath.Base(tc.InputPath), func(t *testing.T) {
			j := fixtureJSON(t, tc.InputPath)
			var decoded map[string]any
			if err := json.Unmarshal(j, &decoded); err != nil {
				t.Fatal(err)
			}
			var live unstructured.Unstructured
			if err := live.UnmarshalJSON(j); err != nil {
				t.Fatal(err)
			}
			for _, obj := range []struct {
				name   string
				object map[string]any
			}{{"decoded", decoded}, {"live", live.Object}} {
				for _, setup := range vmSetups {
					got, err := runHealth(setup, script, obj.object)
					if err != nil {
						t.Fatalf("%s object, %s VM: %v", obj.name, setup.name, err)
					}
					if diff := cmp.Diff(tc.HealthStatus, got); diff != "" {
						t.Errorf("%s object, %s VM: health (-want +got):\n%s", obj.name, setup.name, diff)
					}
				}
			}
		})
	}
}

// TestHealthLuaOddObjects checks that the script copes with fields of
// unexpected types or shapes, as a hand-edited or older object may have:
// it must return a status, never fail.
func TestHealthLuaOddObjects(t *testing.T) {
	script := readScript(t)
	base := func(status any) map[string]any {
		return map[string]any{
			"apiVersion": "proctor.dev/v1alpha1", "kind": "Evaluation",
			"metadata": map[string]any{"name": "odd", "generation": int64(2)},
			"spec":     map[string]any{"suspend": "yes"},
			"status":   status,
		}
	}
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want healthStatus
	}{
		{"empty object", map[string]any{}, healthStatus{"Progressing", "Waiting for the controller to observe the Evaluation"}},
		{"status not an object", base("Running"), healthStatus{"Progressing", "Waiting for the controller to observe generation 2"}},
		{"observedGeneration a string", base(map[string]any{"observedGeneration": "2"}), healthStatus{"Progressing", "Waiting for the controller to observe generation 2"}},
		{"conditions not a list", base(map[string]any{"observedGeneration": int64(2), "phase": "Running", "conditions": "Ready"}), healthStatus{"Progressing", "Running"}},
		{"odd conditions", base(map[string]any{"observedGeneration": int64(2), "phase": "Running", "conditions": []any{nil, "Ready", 3.0, map[string]any{"type": "Ready", "status": true}, map[string]any{"type": "Stalled", "status": "True"}}}), healthStatus{"Degraded", "the run cannot go on"}},
		{"Ready True without a message, score a number", base(map[string]any{"observedGeneration": int64(2), "phase": "Succeeded", "score": 0.5, "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}), healthStatus{"Healthy", "the run succeeded (score 0.5)"}},
		{"Failed without reason nor message", base(map[string]any{"observedGeneration": int64(2), "phase": "Failed"}), healthStatus{"Degraded", "the run failed"}},
		{"no phase, progress not an object", base(map[string]any{"observedGeneration": int64(2), "progress": "40/100"}), healthStatus{"Progressing", "Pending"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, setup := range vmSetups {
				got, err := runHealth(setup, script, tc.obj)
				if err != nil {
					t.Fatalf("%s VM: %v", setup.name, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s VM: health (-want +got):\n%s", setup.name, diff)
				}
			}
		})
	}
}

// TestArgoCDConfigMapHoldsHealthLua checks that argocd-cm.yaml patches Argo
// CD's argocd-cm with health.lua verbatim, under the key Argo CD reads for
// Evaluations (util/settings/settings.go: resource.customizations.health.<group>_<kind>).
func TestArgoCDConfigMapHoldsHealthLua(t *testing.T) {
	b, err := os.ReadFile("argocd-cm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" || cm.Metadata.Name != "argocd-cm" || cm.Metadata.Namespace != "argocd" {
		t.Errorf("argocd-cm.yaml is %s %s %s/%s, want v1 ConfigMap argocd/argocd-cm", cm.APIVersion, cm.Kind, cm.Metadata.Namespace, cm.Metadata.Name)
	}
	key := "resource.customizations.health." + v1alpha1.GroupVersion.Group + "_Evaluation"
	want := map[string]string{key: readScript(t)}
	if diff := cmp.Diff(want, cm.Data); diff != "" {
		t.Errorf("argocd-cm.yaml's data is not health.lua under %s; copy health.lua into it (-want +got):\n%s", key, diff)
	}
}

// TestEveryFixtureIsACase checks that health_test.yaml runs every file of
// testdata, each once, and that they are Evaluations of the API as it is.
func TestEveryFixtureIsACase(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, tc := range readCases(t) {
		cases = append(cases, filepath.Clean(tc.InputPath))
	}
	slices.Sort(cases)
	if dup := duplicates(cases); len(dup) > 0 {
		t.Errorf("health_test.yaml runs these more than once: %v", dup)
	}
	if diff := cmp.Diff(files, slices.Compact(cases)); diff != "" {
		t.Errorf("testdata files (-) and health_test.yaml's inputPaths (+) differ:\n%s", diff)
	}
	for _, f := range files {
		var ev v1alpha1.Evaluation
		if err := yaml.UnmarshalStrict(fixtureJSON(t, f), &ev); err != nil {
			t.Errorf("%s is not an Evaluation of the API: %v", f, err)
			continue
		}
		if ev.APIVersion != v1alpha1.GroupVersion.String() || ev.Kind != "Evaluation" || ev.Generation < 1 {
			t.Errorf("%s: apiVersion %q, kind %q, generation %d; want %s, Evaluation and a generation", f, ev.APIVersion, ev.Kind, ev.Generation, v1alpha1.GroupVersion)
		}
	}
}

func duplicates(sorted []string) []string {
	var dup []string
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] && !slices.Contains(dup, sorted[i]) {
			dup = append(dup, sorted[i])
		}
	}
	return dup
}
