package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/httpapi"
	"github.com/picomq/picomq/internal/syncbuf"
)

// broker is a broker of the test's own, in this process, on a loopback
// port: the CLI reaches it over HTTP as it reaches any.
func broker(t *testing.T) string {
	t.Helper()
	b, err := core.Open(core.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(b, nil, httpapi.Options{}))
	t.Cleanup(func() {
		srv.Close()
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return srv.URL
}

// picomq runs the CLI against server with stdin in; it returns the exit
// status, stdout and stderr.
func picomq(t *testing.T, server, in string, args ...string) (int, string, string) {
	t.Helper()
	return picomqCtx(context.Background(), server, in, args...)
}

func picomqCtx(ctx context.Context, server, in string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "PICOMQ_URL" {
			return server
		}
		return ""
	}
	code := run(ctx, args, env, strings.NewReader(in), &out, &errOut)
	return code, out.String(), errOut.String()
}

func mustRun(t *testing.T, server, in string, args ...string) string {
	t.Helper()
	code, out, errOut := picomq(t, server, in, args...)
	if code != 0 {
		t.Fatalf("picomq %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestStreamsCreateListGetDelete(t *testing.T) {
	t.Parallel()
	url := broker(t)
	out := mustRun(t, url, "", "streams", "create", "app/events", "--partitions", "3", "--content-type", "text/plain", "--retain-for", "1h")
	if !strings.Contains(out, "stream app/events created (3 partitions)") {
		t.Errorf("create: %q", out)
	}
	out = mustRun(t, url, "", "streams", "create", "app/events", "--partitions", "3", "--content-type", "text/plain", "--retain-for", "1h")
	if !strings.Contains(out, "exists, unchanged") {
		t.Errorf("create again: %q, want it left as it is", out)
	}
	mustRun(t, url, "", "streams", "create", "other/one")

	out = mustRun(t, url, "", "streams", "ls", "--prefix", "app/")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "app/events") || strings.Contains(out, "other/one") {
		t.Errorf("ls --prefix app/:\n%s", out)
	}
	var list []streamView
	if err := json.Unmarshal([]byte(mustRun(t, url, "", "streams", "ls", "-o", "json")), &list); err != nil || len(list) != 2 {
		t.Fatalf("ls -o json: %v %+v", err, list)
	}

	out = mustRun(t, url, "", "streams", "get", "app/events")
	for _, want := range []string{"Partitions:    3", "Retain for:    1h0m0s", "text/plain", "not opened yet", "PARTITION"} {
		if !strings.Contains(out, want) {
			t.Errorf("get: no %q in\n%s", want, out)
		}
	}
	var v streamView
	if err := json.Unmarshal([]byte(mustRun(t, url, "", "streams", "get", "app/events", "-o", "json")), &v); err != nil || v.Partitions != 3 || v.Policy.RetainFor != "1h0m0s" || len(v.State) != 3 {
		t.Errorf("get -o json: %v %+v", err, v)
	}

	mustRun(t, url, "", "streams", "delete", "app/events")
	code, _, errOut := picomq(t, url, "", "streams", "get", "app/events")
	if code != 66 || !strings.Contains(errOut, "STREAM_NOT_FOUND") {
		t.Errorf("get after delete: exit %d %q, want 66 (EX_NOINPUT) and the coded error", code, errOut)
	}
}

func TestAppendThenRead(t *testing.T) {
	t.Parallel()
	url := broker(t)
	mustRun(t, url, "", "streams", "create", "logs")
	out := mustRun(t, url, "one\ntwo\nthree\n", "append", "logs")
	if !strings.Contains(out, "appended 3 records to partition 0 at offsets 0..2") {
		t.Errorf("append: %q", out)
	}
	file := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(file, []byte("a\x00binary\nblob"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, url, "", "append", "logs", "--file", file, "--whole", "--key", "k")

	out = mustRun(t, url, "", "read", "logs", "-o", "raw", "--max", "3")
	if out != "one\ntwo\nthree\n" {
		t.Errorf("read -o raw --max 3: %q", out)
	}
	out = mustRun(t, url, "", "read", "logs", "--from", "2")
	if !strings.Contains(out, "three") || strings.Contains(out, "two") || !strings.Contains(out, `"a\x00binary\nblob"`) {
		t.Errorf("read --from 2 (the binary record quoted):\n%s", out)
	}
	var lines []entryView
	for _, l := range strings.Split(strings.TrimSpace(mustRun(t, url, "", "read", "logs", "-o", "json")), "\n") {
		var e entryView
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("read -o json line %q: %v", l, err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 4 || lines[3].Offset != 3 || lines[3].Key != "k" || lines[3].Payload == nil || *lines[3].Payload != "a\x00binary\nblob" {
		t.Errorf("read -o json: %+v", lines)
	}
	// Bytes that are not UTF-8 travel as base64, whole.
	if err := os.WriteFile(file, []byte{0xff, 0xfe, 'x'}, 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, url, "", "append", "logs", "--file", file, "--whole")
	var bin entryView
	if err := json.Unmarshal([]byte(mustRun(t, url, "", "read", "logs", "--from", "4", "-o", "json")), &bin); err != nil ||
		bin.Payload != nil || string(bin.PayloadBase64) != "\xff\xfex" {
		t.Errorf("read -o json of a payload that is not UTF-8: %+v, %v", bin, err)
	}
	if out := mustRun(t, url, "", "read", "logs", "--from", "99"); strings.TrimSpace(out) != "" {
		t.Errorf("read past the end: %q, want nothing", out)
	}
	if out := mustRun(t, url, "", "read", "logs", "--since", "1h", "-o", "raw", "--max", "1"); out != "one\n" {
		t.Errorf("read --since 1h: %q", out)
	}
}

// A refusal part way through says what was written before it.
func TestAppendRefusedPartWayReportsWhatWasWritten(t *testing.T) {
	t.Parallel()
	url := broker(t)
	mustRun(t, url, "", "streams", "create", "small", "--max-record-bytes", "64")
	in := strings.Repeat("x\n", appendBatch) + strings.Repeat("y", 100) + "\n"
	code, out, errOut := picomq(t, url, in, "append", "small")
	if code == 0 || !strings.Contains(errOut, "RECORD_TOO_LARGE") || !strings.Contains(out, "appended 1000 records to partition 0 at offsets 0..999") {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant the first batch reported, then the refusal", code, out, errOut)
	}
}

// A Stream-Seq names one batch: the whole input goes as one, and the
// same seq again is refused.
func TestStreamSeqMakesTheInputOneBatch(t *testing.T) {
	t.Parallel()
	url := broker(t)
	mustRun(t, url, "", "streams", "create", "seq")
	in := strings.Repeat("x\n", appendBatch+1)
	if out := mustRun(t, url, in, "append", "seq", "--stream-seq", "a"); !strings.Contains(out, "appended 1001 records to partition 0 at offsets 0..1000") {
		t.Errorf("append --stream-seq: %q, want one batch", out)
	}
	if code, _, errOut := picomq(t, url, "x\n", "append", "seq", "--stream-seq", "a"); code == 0 || !strings.Contains(errOut, "STREAM_SEQ_ORDER") {
		t.Errorf("the same --stream-seq again: %d %q, want STREAM_SEQ_ORDER", code, errOut)
	}
}

func TestIdempotentAppendIsWrittenOnce(t *testing.T) {
	t.Parallel()
	url := broker(t)
	args := []string{"append", "orders", "--create", "--producer-id", "p1", "--producer-epoch", "0", "--producer-seq", "0"}
	if out := mustRun(t, url, "x\ny\n", args...); !strings.Contains(out, "appended 2 records") {
		t.Errorf("first: %q", out)
	}
	if out := mustRun(t, url, "x\ny\n", args...); !strings.Contains(out, "duplicate") {
		t.Errorf("repeat: %q, want a duplicate", out)
	}
	if out := mustRun(t, url, "", "read", "orders", "-o", "raw"); out != "x\ny\n" {
		t.Errorf("the stream holds %q, want the batch once", out)
	}
}

func TestTailFollowsUntilInterrupted(t *testing.T) {
	t.Parallel()
	url := broker(t)
	mustRun(t, url, "", "streams", "create", "live", "--partitions", "2")
	mustRun(t, url, "old\n", "append", "live", "--partition", "0")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, []string{"tail", "live", "-o", "raw", "--wait", "1s"}, func(k string) string {
			if k == "PICOMQ_URL" {
				return url
			}
			return ""
		}, strings.NewReader(""), out, &bytes.Buffer{})
		done <- code
	}()
	// tail begins at the end: keep appending until a record shows, then
	// one to each partition must follow.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "new") {
		if time.Now().After(deadline) {
			t.Fatalf("tail printed %q, no appended record", out.String())
		}
		mustRun(t, url, "new\n", "append", "live", "--partition", "0")
		time.Sleep(50 * time.Millisecond) // paces the appends while tail parks its long-polls
	}
	mustRun(t, url, "p1\n", "append", "live", "--partition", "1")
	for !strings.Contains(out.String(), "p1") {
		if time.Now().After(deadline) {
			t.Fatalf("tail printed %q, not partition 1's record", out.String())
		}
		time.Sleep(10 * time.Millisecond) // polls the output
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("tail ended with %d when interrupted, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not end when interrupted")
	}
	if strings.Contains(out.String(), "old") {
		t.Errorf("tail printed a record from before it began: %q", out.String())
	}
}

func TestGroups(t *testing.T) {
	t.Parallel()
	url := broker(t)
	mustRun(t, url, "", "streams", "create", "g", "--partitions", "2")
	mustRun(t, url, "a\nb\n", "append", "g", "--partition", "1")
	code, _, errOut := picomq(t, url, "", "groups", "commit", "g", "readers", "2")
	if code != exitUsage || !strings.Contains(errOut, "--partition") {
		t.Errorf("commit without --partition on 2 partitions: %d %q", code, errOut)
	}
	mustRun(t, url, "", "groups", "commit", "g", "readers", "2", "--partition", "1")
	out := mustRun(t, url, "", "groups", "get", "g", "readers")
	if !strings.Contains(out, "readers   0           -") || !strings.Contains(out, "readers   1           2") {
		t.Errorf("groups get (nothing committed in partition 0):\n%s", out)
	}
	if code, _, errOut := picomq(t, url, "", "groups", "get", "g", "nobody"); code != 66 || !strings.Contains(errOut, "UNKNOWN_GROUP") {
		t.Errorf("groups get of a group that committed nothing: %d %q", code, errOut)
	}
}

func TestClusterStatusOfALoneBroker(t *testing.T) {
	t.Parallel()
	url := broker(t)
	out := mustRun(t, url, "", "cluster", "status")
	for _, want := range []string{"Ready:", "Raft state:", "none: a lone broker"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// Refusals end with the coded error's exit status and message; a bad
// command line is 64 before any request.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	url := broker(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"streams", "get"}, exitUsage, "takes a stream name"},
		{[]string{"streams", "ls", "--no-such-flag"}, exitUsage, "unknown flag"},
		{[]string{"read", "x", "-o", "yaml"}, exitUsage, "--output must be"},
		{[]string{"read", "missing"}, 66, "STREAM_NOT_FOUND"},
		{[]string{"read", "x", "--since", "yesterday"}, exitUsage, "--since"},
		{[]string{"read", "x", "--since", "1h", "--from", "0"}, exitUsage, "give one"},
		{[]string{"streams", "create", "bad name"}, 78, "field=name"},
		{[]string{"--server", "ftp://x", "streams", "ls"}, exitUsage, "--server"},
		{[]string{"--server", "http://127.0.0.1:1", "streams", "ls"}, 69, "BROKER_UNREACHABLE"},
	} {
		mustRun(t, url, "", "streams", "create", "x")
		code, _, errOut := picomq(t, url, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("picomq %s: exit %d %q, want %d and %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
}
