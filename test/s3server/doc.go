// Package s3server runs a real S3-compatible object store for the tests of
// tiered storage (sealed segments uploaded to S3), and a fault proxy in
// front of it.
//
// The server is SeaweedFS's weed (Apache-2.0), one process on loopback
// running its master, a volume server, a filer and the S3 gateway: the S3
// API over HTTP with AWS Signature V4, ranged GETs, listings and real
// error codes, on a persistent data folder, so that a restart, a kill -9
// and a change of credentials are what they would be in production. It is
// built from its Go module once per machine (hack/seaweedfs.sh, about
// 8.5 min on 2 cores the first time, cached under ~/.cache/picomq/seaweedfs/), as
// Prometheus is for the alert tests: no container runtime, no download
// from outside the Go toolchain, and the same binary everywhere.
//
// A test starts one with
//
//	s := s3server.Start(t, s3server.Options{Buckets: []string{"tier"}})
//	f := s.Proxy(t) // the broker is given f.Endpoint(), not s.Endpoint()
//
// and reads what landed with s.Keys, s.Get, or damages it with s.Corrupt;
// s.Restart keeps the data (optionally with another set of credentials:
// a rotated-out key is refused), s.Kill is a crash. The proxy's modes,
// switched while the broker runs: Pass, Cut (every connection closed,
// open ones included), Blackhole (requests held: clients time out),
// Slow(d), and Fail(status, fraction) (S3's XML errors, 503 SlowDown or
// 500 InternalError, on a seeded choice of requests); Counts says what it
// saw and failed per method.
//
// Start takes about 11 s on 2 cores: the S3 API answers after 2 s, but
// the first write waits ~8 s for the filer to announce itself to the
// master (a fixed hold of weed's); Start makes that write (a probe object,
// deleted) into each bucket so a test's first write is not the slow one.
// A Restart takes about 17 s: a restarted master refuses new writes for a
// fixed 15 s, and Restart returns once one lands. weed mini would start
// in 5 s but brings an admin server on a fixed port (23646) and
// maintenance workers that vacuum and rebalance under the test; weed
// server runs the master, a volume server, the filer and the S3 gateway
// only. Start skips under -short, and without weed unless CI or
// PICOMQ_REQUIRE_S3=1 is set, where it fails (Require); PICOMQ_WEED names
// a binary to use instead of hack/seaweedfs.sh's. The process's log is in
// the test's temporary folder and is printed when the test fails.
package s3server
