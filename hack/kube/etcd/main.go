// Command etcd is etcd's own server, built from the module proxy at the version
// Kubernetes pins, for the test API server and the local cluster.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
