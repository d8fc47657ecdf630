package main

import "testing"

func TestCountLeaseWrites(t *testing.T) {
	raw := []byte(`# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="POST",version="v1"} 67
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="GET",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 1000
`)
	n, err := countLeaseWrites(raw)
	if err != nil || n != 190 {
		t.Fatalf("countLeaseWrites = %v, %v; want 190 (PUTs and POSTs of leases, refused ones included)", n, err)
	}
}
