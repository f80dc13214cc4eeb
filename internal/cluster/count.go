package cluster

import (
	"bytes"
	"fmt"

	"github.com/proctor-dev/proctor/api/v1alpha1"
	"github.com/proctor-dev/proctor/runner/dataset"
)

// CountInMemory counts the samples of a dataset the controller can read itself:
// inline items, or a ConfigMap's data. ok is false for sources only a runner pod
// can read (url, pvc), which the planner Job counts.
func CountInMemory(d *v1alpha1.Dataset, configMapData []byte) (n int, ok bool, err error) {
	switch {
	case len(d.Source.Inline) > 0:
		return d.Limited(len(d.Source.Inline)), true, nil
	case d.Source.ConfigMap != nil:
		format := dataset.Format(d.Format)
		if format == "" {
			format = dataset.FormatFromName(d.Source.ConfigMap.Key)
		}
		r, err := dataset.Decompress(bytes.NewReader(configMapData))
		if err != nil {
			return 0, true, err
		}
		n, err := dataset.Count(r, format)
		if err != nil {
			return 0, true, fmt.Errorf("ConfigMap %s key %s: %w", d.Source.ConfigMap.Name, d.Source.ConfigMap.Key, err)
		}
		return d.Limited(n), true, nil
	}
	return 0, false, nil
}
