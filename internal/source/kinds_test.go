package source

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/internal/cluster/kube"
)

// TestKindsCoverTheAPI ties the kinds to the API: every field of
// DatasetSource that selects data has exactly one kind, so a source added to
// the API without its file here fails.
func TestKindsCoverTheAPI(t *testing.T) {
	var fields []string
	typ := reflect.TypeOf(v1alpha1.DatasetSource{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "sha256" { // a check of url's data, not a source
			continue
		}
		fields = append(fields, name)
	}
	got := Kinds()
	slices.Sort(fields)
	slices.Sort(got)
	if diff := cmp.Diff(fields, got); diff != "" {
		t.Errorf("source kinds vs DatasetSource fields (-API +kinds):\n%s", diff)
	}
	for _, k := range kinds {
		if got := Of(sourceOf(k.Field())); got != k {
			t.Errorf("Of(a %s source) = %v, want %v", k.Field(), got, k)
		}
	}
	if got := Of(&v1alpha1.DatasetSource{}); got != nil {
		t.Errorf("Of(no source) = %v, want nil", got)
	}
}

func sourceOf(field string) *v1alpha1.DatasetSource {
	switch field {
	case "inline":
		return &v1alpha1.DatasetSource{Inline: inline(1)}
	case "configMap":
		return &v1alpha1.DatasetSource{ConfigMap: &v1alpha1.ConfigMapSource{Name: "qa", Key: "d.jsonl"}}
	case "url":
		return &v1alpha1.DatasetSource{URL: "https://example.com/d.jsonl"}
	case "pvc":
		return &v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "data", Path: "sub/d.jsonl"}}
	case "file":
		return &v1alpha1.DatasetSource{File: "d.jsonl"}
	}
	return nil
}

// TestCapabilities says which kind does what, in one table: where each can be
// read and what the controller does with it.
func TestCapabilities(t *testing.T) {
	type caps struct{ Items, Fetch, Lookup, Snapshot, Held, InPod, Mount bool }
	want := map[string]caps{
		"inline":    {Items: true},
		"file":      {Fetch: true, Lookup: true},
		"url":       {Fetch: true},
		"configMap": {Fetch: true, Lookup: true, Snapshot: true, Held: true, InPod: true},
		"pvc":       {Fetch: true, Lookup: true, InPod: true, Mount: true},
	}
	for _, k := range kinds {
		var got caps
		_, got.Items = k.(Itemized)
		_, got.Fetch = k.(Fetcher)
		_, got.Lookup = k.(Referencing)
		_, got.Snapshot = k.(Snapshotted)
		_, got.Held = k.(Held)
		_, got.InPod = k.(InPod)
		_, got.Mount = k.(Mounted)
		if diff := cmp.Diff(want[k.Field()], got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k.Field(), diff)
		}
	}
}

func TestLookup(t *testing.T) {
	objs := []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "qa"}, Data: map[string]string{"d.jsonl": "{}"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}},
	}
	c := fake.NewClientBuilder().WithRuntimeObjects(objs...).Build()
	cases := []struct {
		name        string
		src         *v1alpha1.DatasetSource
		wantHeld    bool
		wantMissing string
		wantInvalid string
	}{
		{name: "configMap", src: sourceOf("configMap"), wantHeld: true},
		{name: "configMap not found", src: &v1alpha1.DatasetSource{ConfigMap: &v1alpha1.ConfigMapSource{Name: "nope", Key: "d.jsonl"}},
			wantMissing: "ConfigMap nope (spec.datasets[0].source.configMap) not found"},
		{name: "configMap without the key", src: &v1alpha1.DatasetSource{ConfigMap: &v1alpha1.ConfigMapSource{Name: "qa", Key: "other"}},
			wantMissing: "ConfigMap qa has no key other (spec.datasets[0].source.configMap.key)"},
		{name: "pvc", src: sourceOf("pvc")},
		{name: "pvc not found", src: &v1alpha1.DatasetSource{PVC: &v1alpha1.PVCSource{ClaimName: "nope", Path: "d"}},
			wantMissing: "PersistentVolumeClaim nope (spec.datasets[0].source.pvc) not found"},
		{name: "file", src: sourceOf("file"), wantInvalid: "spec.datasets[0].source.file: a local file cannot be read in a cluster"},
	}
	for _, tc := range cases {
		d := &v1alpha1.Dataset{Name: "d", Source: *tc.src}
		found, err := Of(tc.src).(Referencing).Lookup(context.Background(), kube.Getter(c), "ns", d, "spec.datasets[0].source")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (found.Held != nil) != tc.wantHeld {
			t.Errorf("%s: held %v, want %v", tc.name, found.Held != nil, tc.wantHeld)
		}
		var missing string
		if found.Missing != nil {
			missing = found.Missing.Message
		}
		if missing != tc.wantMissing {
			t.Errorf("%s: missing %q, want %q", tc.name, missing, tc.wantMissing)
		}
		if !strings.HasPrefix(found.Invalid, tc.wantInvalid) || (tc.wantInvalid == "") != (found.Invalid == "") {
			t.Errorf("%s: invalid %q, want %q", tc.name, found.Invalid, tc.wantInvalid)
		}
	}
}

func TestPVCInPodAndVolume(t *testing.T) {
	d := &v1alpha1.Dataset{Name: "d", Source: *sourceOf("pvc")}
	got, err := PVC{}.InPod(context.Background(), Pod{DatasetRoot: "/datasets"}, d)
	if err != nil || got != "/datasets/data/sub/d.jsonl" {
		t.Errorf("InPod = %q, %v; want /datasets/data/sub/d.jsonl", got, err)
	}
	v, m := PVC{}.Volume(d, "dataset-0")
	if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "data" || !v.PersistentVolumeClaim.ReadOnly {
		t.Errorf("volume = %+v, want the claim data read-only", v)
	}
	if m.Name != "dataset-0" || m.MountPath != "/datasets/data" || !m.ReadOnly {
		t.Errorf("mount = %+v, want dataset-0 at /datasets/data read-only", m)
	}
}

func TestClusterSourcesNeedACluster(t *testing.T) {
	for _, field := range []string{"configMap", "pvc"} {
		d := &v1alpha1.Dataset{Name: "d", Source: *sourceOf(field)}
		_, err := Of(&d.Source).(Fetcher).Fetch(context.Background(), d, "spec.datasets[0]", Env{})
		if want := "spec.datasets[0].source." + field + ": only works in a cluster"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Fetch without Resolve = %v, want %q", field, err, want)
		}
	}
}
