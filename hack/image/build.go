package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type kind int

const (
	kindFile kind = iota
	kindDir
	kindSymlink
)

// entry is one file system object of the layer.
type entry struct {
	path     string // absolute and clean, e.g. /etc/passwd
	kind     kind
	mode     int64 // permission bits incl. setuid/setgid/sticky; -1: the source's
	uid, gid int
	src      string // kindFile: read from this file...
	data     []byte // ...or, when src is empty, these bytes
	target   string // kindSymlink
	skeleton bool   // from the skeleton: a flag's entry may replace it
}

// cleanPath checks that p is an absolute path inside the image and cleans it.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q in the image must be absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", errors.New("the root directory is implied")
	}
	return c, nil
}

type result struct {
	configDigest v1.Hash
	entries      int
	size         int64
}

// build writes the image that opts describe to opts.out.
func build(opts *options) (*result, error) {
	entries, err := collect(opts)
	if err != nil {
		return nil, err
	}
	epoch := time.Unix(opts.epoch, 0).UTC()
	layerTar, err := writeLayerTar(entries, epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}

	cfg := &v1.ConfigFile{
		Architecture: opts.arch,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		// mutate.Append fills in diff_ids; the type must be set here, or it is
		// "", which Docker refuses.
		RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: opts.entrypoint,
			Cmd:        opts.cmd,
			User:       opts.user,
			Env:        environment(opts),
			WorkingDir: opts.workdir,
			Labels:     opts.labels,
		},
	}
	if len(cfg.Config.Labels) == 0 {
		cfg.Config.Labels = nil
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "hack/image (github.com/proctor-dev/proctor)",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	size, err := writeArchive(opts.out, opts.tags, img)
	if err != nil {
		return nil, err
	}
	d, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	return &result{configDigest: d, entries: len(entries), size: size}, nil
}

// environment is the default PATH and SSL_CERT_FILE with -env applied on top:
// a key given again replaces the value in place, so the order stays stable.
func environment(opts *options) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if opts.skeleton && opts.caBundle != "" {
		env = append(env, "SSL_CERT_FILE="+caPath)
	}
	for _, kv := range opts.env {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if i >= 0 {
			env[i] = kv
		} else {
			env = append(env, kv)
		}
	}
	return env
}

// collect merges the skeleton and the flags' entries, adds the missing parent
// directories and returns them sorted by path (parents first).
func collect(opts *options) ([]entry, error) {
	byPath := map[string]entry{}
	if opts.skeleton {
		sk, err := skeleton(opts.caBundle)
		if err != nil {
			return nil, err
		}
		for _, e := range sk {
			e.skeleton = true
			byPath[e.path] = e
		}
	}
	for _, e := range opts.entries {
		if old, ok := byPath[e.path]; ok && !old.skeleton {
			return nil, fmt.Errorf("%s is given twice", e.path)
		}
		if e.kind == kindFile {
			fi, err := os.Stat(e.src)
			if err != nil {
				return nil, fmt.Errorf("-file %s: %w", e.path, err)
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("-file %s: %s is not a regular file (use -dir for an empty directory)", e.path, e.src)
			}
			if e.mode < 0 {
				e.mode = int64(fi.Mode().Perm())
			}
			if !opts.allowDynamic {
				if err := checkBinary(e.src, opts.arch); err != nil {
					return nil, fmt.Errorf("-file %s: %w", e.path, err)
				}
			}
		}
		byPath[e.path] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = entry{path: dir, kind: kindDir, mode: 0o755}
			}
		}
	}
	var out []entry
	for _, e := range byPath {
		if dir := path.Dir(e.path); dir != "/" && byPath[dir].kind != kindDir {
			return nil, fmt.Errorf("%s: its parent %s is not a directory", e.path, dir)
		}
		out = append(out, e)
	}
	// A parent is a prefix of its children, so it sorts before them.
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// writeLayerTar renders the entries as an uncompressed tar with fixed times
// and numeric owners only, so its bytes depend on nothing else.
func writeLayerTar(entries []entry, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.path, "/"),
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			// PAX keeps long busybox-style names and large ids exact.
			Format: tar.FormatPAX,
		}
		var content []byte
		switch e.kind {
		case kindDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case kindSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.target
		case kindFile:
			hdr.Typeflag = tar.TypeReg
			content = e.data
			if e.src != "" {
				b, err := os.ReadFile(e.src)
				if err != nil {
					return nil, fmt.Errorf("reading %s for %s: %w", e.src, e.path, err)
				}
				content = b
			}
			hdr.Size = int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.path, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as a docker-archive: the config blob, the layer
// blobs and manifest.json. It is tarball.Write's format, written here because
// tarball.Write orders several tags of one image by map iteration, which
// would break byte-for-byte reproducibility. The file appears atomically.
func writeArchive(out string, tags []string, img v1.Image) (int64, error) {
	repoTags := slices.Clone(tags)
	sort.Strings(repoTags)
	repoTags = slices.Compact(repoTags)

	cfgName, err := img.ConfigName()
	if err != nil {
		return 0, err
	}
	cfgBlob, err := img.RawConfigFile()
	if err != nil {
		return 0, err
	}
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return 0, fmt.Errorf("-o %s: %w", out, err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return 0, fmt.Errorf("-o %s: %w", out, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	defer f.Close()

	tw := tar.NewWriter(f)
	add := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: size, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s into %s: %w", name, out, err)
		}
		if _, err := io.Copy(tw, r); err != nil {
			return fmt.Errorf("writing %s into %s: %w", name, out, err)
		}
		return nil
	}
	// Named as docker save does: tar reads a colon (sha256:...) as a tape host.
	cfgFile := cfgName.Hex + ".json"
	if err := add(cfgFile, int64(len(cfgBlob)), bytes.NewReader(cfgBlob)); err != nil {
		return 0, err
	}
	desc := tarball.Descriptor{Config: cfgFile, RepoTags: repoTags}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return 0, err
		}
		size, err := l.Size()
		if err != nil {
			return 0, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return 0, err
		}
		file := d.Hex + ".tar.gz"
		err = add(file, size, rc)
		rc.Close()
		if err != nil {
			return 0, err
		}
		desc.Layers = append(desc.Layers, file)
	}
	manifest, err := json.Marshal(tarball.Manifest{desc})
	if err != nil {
		return 0, err
	}
	if err := add("manifest.json", int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return 0, err
	}
	if err := tw.Close(); err != nil {
		return 0, fmt.Errorf("closing %s: %w", out, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := f.Chmod(0o644); err != nil {
		return 0, fmt.Errorf("-o %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("-o %s: %w", out, err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return 0, fmt.Errorf("-o %s: %w", out, err)
	}
	return fi.Size(), nil
}

// elfMachines maps the GOARCH spelling of -arch to the ELF machine.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"386":     elf.EM_386,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// checkBinary fails when file is an ELF executable that could not run in the
// image: dynamically linked (there is no libc or loader) or for another
// architecture. Files that are not ELF pass.
func checkBinary(file, arch string) error {
	f, err := elf.Open(file)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil // not ELF (or shorter than an ELF header)
		}
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(p.Open(), 256))
			return fmt.Errorf("%s is dynamically linked (loader %s); the image has no libc, so it needs a static binary",
				file, strings.TrimRight(string(interp), "\x00"))
		}
	}
	if want, ok := elfMachines[arch]; ok && f.Machine != want {
		return fmt.Errorf("%s is built for %s, not for -arch %s", file, f.Machine, arch)
	}
	return nil
}
