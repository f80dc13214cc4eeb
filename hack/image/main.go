// Command image builds a single-layer container image from local files and
// writes it as a docker-archive tarball (the format of `docker save`), without
// Docker or a registry. containerd takes it with `ctr images import`.
//
//	go run . -o bin/images/proctor.tar -tag ghcr.io/proctor-dev/proctor:v0.1.0 \
//	    -file /proctor=../../bin/proctor:0755 -entrypoint /proctor -user 65532:65532 \
//	    -label org.opencontainers.image.source=https://github.com/proctor-dev/proctor
//
// The output depends only on the flags and the files' contents: every mtime is
// the build epoch (SOURCE_DATE_EPOCH, or 0), owners are numeric, entries are
// sorted, so two builds of the same inputs are byte for byte the same.
//
// By default the layer carries a minimal rootfs for a static non-root binary
// (see skeleton.go); -skeleton=false leaves it out, as for the pause image.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// options is the parsed command line.
type options struct {
	out          string
	tags         []string
	entries      []entry // from -file, -dir, -symlink, in flag order
	entrypoint   []string
	cmd          []string
	user         string
	workdir      string
	env          []string
	labels       map[string]string
	arch         string
	skeleton     bool
	caBundle     string
	epoch        int64
	allowDynamic bool
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout, stderr io.Writer) error {
	opts, checkStatic, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if checkStatic != "" {
		if err := checkBinary(checkStatic, opts.arch); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: static or not ELF, fine for %s\n", checkStatic, opts.arch)
		return nil
	}
	res, err := build(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s (image id %s, %d files, %d bytes)\n",
		opts.out, strings.Join(opts.tags, ", "), res.configDigest, res.entries, res.size)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, string, error) {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tags, files, dirs, links, trees, entrypoint, cmd, env, labels listFlag
	)
	opts := &options{labels: map[string]string{}}
	fs.StringVar(&opts.out, "o", "", "`path` of the docker-archive tarball to write (required)")
	fs.Var(&tags, "tag", "image `reference`, e.g. ghcr.io/proctor-dev/proctor:v0.1.0 (repeatable; at least one)")
	fs.Var(&files, "file", "add a file: `DEST=SRC[:MODE]`, MODE octal, default the source's permissions; owner 0:0 (repeatable)")
	fs.Var(&dirs, "dir", "add an empty directory: `DEST[:MODE[:UID:GID]]`, default 0755 0:0 (repeatable)")
	fs.Var(&links, "symlink", "add a symbolic link: `DEST=TARGET` (repeatable)")
	fs.Var(&trees, "tree", "add a directory's whole tree at DEST: `DEST=SRCDIR`, with its files' modes and its symbolic links as they are; owner 0:0 (repeatable)")
	fs.Var(&entrypoint, "entrypoint", "one `arg` of the entrypoint (repeatable, in order)")
	fs.Var(&cmd, "cmd", "one `arg` of the default command (repeatable, in order)")
	fs.StringVar(&opts.user, "user", "", "`uid[:gid]` the container runs as (default root)")
	fs.StringVar(&opts.workdir, "workdir", "/", "working `directory`")
	fs.Var(&env, "env", "environment `K=V`, overriding the defaults PATH and SSL_CERT_FILE (repeatable)")
	fs.Var(&labels, "label", "image label `K=V` (repeatable)")
	fs.StringVar(&opts.arch, "arch", runtime.GOARCH, "image `architecture` (GOARCH spelling)")
	fs.BoolVar(&opts.skeleton, "skeleton", true, "add the minimal rootfs: /etc/passwd, /etc/group, /etc/nsswitch.conf, /home/nonroot, /root, /tmp and the CA bundle")
	fs.StringVar(&opts.caBundle, "ca-bundle", defaultCABundle, "`file` copied to "+caPath+" with -skeleton; empty to leave it out")
	fs.BoolVar(&opts.allowDynamic, "allow-dynamic", false, "accept dynamically linked ELF files (the image has no libc, so they would not run)")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "`seconds` since 1970 for every timestamp (default $SOURCE_DATE_EPOCH, else 0)")
	checkStatic := fs.String("check-static", "", "only check that `file` is a static ELF binary for -arch (or not ELF), then exit")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	if fs.NArg() > 0 {
		return nil, "", fmt.Errorf("unexpected argument %q: every input is a flag", fs.Arg(0))
	}
	if *epoch != "" {
		n, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("-epoch (or SOURCE_DATE_EPOCH) %q: want whole seconds since 1970", *epoch)
		}
		opts.epoch = n
	}
	if *checkStatic != "" {
		return opts, *checkStatic, nil
	}
	if opts.out == "" {
		return nil, "", errors.New("-o is required")
	}
	if len(tags) == 0 {
		return nil, "", errors.New("-tag is required")
	}
	for _, t := range tags {
		// Weak validation: short names such as busybox:1.35.0 are fine, as
		// containerd normalizes them on import.
		if _, err := name.NewTag(t); err != nil {
			return nil, "", fmt.Errorf("-tag %q: %w", t, err)
		}
	}
	opts.tags = tags
	for _, f := range files {
		e, err := parseFile(f)
		if err != nil {
			return nil, "", err
		}
		opts.entries = append(opts.entries, e)
	}
	for _, d := range dirs {
		e, err := parseDir(d)
		if err != nil {
			return nil, "", err
		}
		opts.entries = append(opts.entries, e)
	}
	for _, l := range links {
		e, err := parseSymlink(l)
		if err != nil {
			return nil, "", err
		}
		opts.entries = append(opts.entries, e)
	}
	for _, t := range trees {
		es, err := parseTree(t)
		if err != nil {
			return nil, "", err
		}
		opts.entries = append(opts.entries, es...)
	}
	opts.entrypoint, opts.cmd = entrypoint, cmd
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, "", fmt.Errorf("-env %q: want K=V", e)
		}
		opts.env = append(opts.env, e)
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, "", fmt.Errorf("-label %q: want K=V", l)
		}
		opts.labels[k] = v
	}
	if opts.arch == "" {
		return nil, "", errors.New("-arch must not be empty")
	}
	return opts, "", nil
}

// parseFile parses -file DEST=SRC[:MODE]. A trailing :MODE counts only when it
// is octal, so a source path may itself contain colons.
func parseFile(v string) (entry, error) {
	dest, src, ok := strings.Cut(v, "=")
	if !ok || src == "" {
		return entry{}, fmt.Errorf("-file %q: want DEST=SRC[:MODE]", v)
	}
	p, err := cleanPath(dest)
	if err != nil {
		return entry{}, fmt.Errorf("-file %q: %w", v, err)
	}
	e := entry{path: p, kind: kindFile, src: src, mode: -1}
	if i := strings.LastIndexByte(src, ':'); i > 0 {
		if m, err := parseMode(src[i+1:]); err == nil {
			e.src, e.mode = src[:i], m
		}
	}
	return e, nil
}

// parseDir parses -dir DEST[:MODE[:UID:GID]].
func parseDir(v string) (entry, error) {
	parts := strings.Split(v, ":")
	p, err := cleanPath(parts[0])
	if err != nil {
		return entry{}, fmt.Errorf("-dir %q: %w", v, err)
	}
	e := entry{path: p, kind: kindDir, mode: 0o755}
	switch len(parts) {
	case 1:
	case 2, 4:
		if e.mode, err = parseMode(parts[1]); err != nil {
			return entry{}, fmt.Errorf("-dir %q: %w", v, err)
		}
		if len(parts) == 4 {
			if e.uid, err = strconv.Atoi(parts[2]); err != nil || e.uid < 0 {
				return entry{}, fmt.Errorf("-dir %q: uid %q is not a number", v, parts[2])
			}
			if e.gid, err = strconv.Atoi(parts[3]); err != nil || e.gid < 0 {
				return entry{}, fmt.Errorf("-dir %q: gid %q is not a number", v, parts[3])
			}
		}
	default:
		return entry{}, fmt.Errorf("-dir %q: want DEST[:MODE[:UID:GID]]", v)
	}
	return e, nil
}

// parseTree parses -tree DEST=SRCDIR and reads the tree's entries: its
// directories, regular files and symbolic links (not followed).
func parseTree(v string) ([]entry, error) {
	dest, src, ok := strings.Cut(v, "=")
	if !ok || src == "" {
		return nil, fmt.Errorf("-tree %q: want DEST=SRCDIR", v)
	}
	if dest != "/" {
		if _, err := cleanPath(dest); err != nil {
			return nil, fmt.Errorf("-tree %q: %w", v, err)
		}
	}
	var out []entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		e := entry{path: path.Join(dest, filepath.ToSlash(rel))}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			e.kind, e.mode = kindDir, int64(info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
			e.kind, e.mode = kindSymlink, 0o777
		case d.Type().IsRegular():
			e.kind, e.src, e.mode = kindFile, p, int64(info.Mode().Perm())
		default:
			return fmt.Errorf("%s is neither a directory, a regular file nor a symbolic link", p)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("-tree %q: %w", v, err)
	}
	return out, nil
}

// parseSymlink parses -symlink DEST=TARGET.
func parseSymlink(v string) (entry, error) {
	dest, target, ok := strings.Cut(v, "=")
	if !ok || target == "" {
		return entry{}, fmt.Errorf("-symlink %q: want DEST=TARGET", v)
	}
	p, err := cleanPath(dest)
	if err != nil {
		return entry{}, fmt.Errorf("-symlink %q: %w", v, err)
	}
	return entry{path: p, kind: kindSymlink, target: target, mode: 0o777}, nil
}

func parseMode(s string) (int64, error) {
	if len(s) < 3 || len(s) > 4 {
		return 0, fmt.Errorf("mode %q: want 3 or 4 octal digits", s)
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q: want 3 or 4 octal digits", s)
	}
	return int64(m), nil
}
