// Command etcd is etcd's own main, built from Go modules so that envtest has an
// etcd server on machines that cannot download the release binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
