package main

import (
	"fmt"
	"os"
)

const (
	// caPath is where Go's crypto/x509 and most other TLS stacks look first.
	caPath = "/etc/ssl/certs/ca-certificates.crt"
	// defaultCABundle is Debian's and Ubuntu's bundle (package ca-certificates).
	defaultCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// The same users as distroless/static, so an image built here and one built
// from the Dockerfile agree on uid 65532 and its home.
const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`

const group = `root:x:0:
nobody:x:65534:
nonroot:x:65532:
`

// Go's resolver honours this file; spelling it out avoids depending on its
// fallback when the file is absent.
const nsswitch = `hosts: files dns
`

// skeleton is the minimal rootfs for a static binary running as non-root: user
// and group names (for tools that look them up), a writable home and /tmp,
// and the CA bundle so a runner can call real HTTPS model APIs. caBundle ""
// leaves the bundle out.
func skeleton(caBundle string) ([]entry, error) {
	es := []entry{
		{path: "/etc", kind: kindDir, mode: 0o755},
		{path: "/etc/passwd", kind: kindFile, mode: 0o644, data: []byte(passwd)},
		{path: "/etc/group", kind: kindFile, mode: 0o644, data: []byte(group)},
		{path: "/etc/nsswitch.conf", kind: kindFile, mode: 0o644, data: []byte(nsswitch)},
		{path: "/home", kind: kindDir, mode: 0o755},
		{path: "/home/nonroot", kind: kindDir, mode: 0o700, uid: 65532, gid: 65532},
		{path: "/root", kind: kindDir, mode: 0o700},
		{path: "/tmp", kind: kindDir, mode: 0o1777},
	}
	if caBundle != "" {
		fi, err := os.Stat(caBundle)
		if err != nil {
			return nil, fmt.Errorf("-ca-bundle: %w (install the Debian package ca-certificates, or pass -ca-bundle \"\" to leave it out)", err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("-ca-bundle: %s is not a regular file", caBundle)
		}
		es = append(es, entry{path: caPath, kind: kindFile, mode: 0o644, src: caBundle})
	}
	return es, nil
}
