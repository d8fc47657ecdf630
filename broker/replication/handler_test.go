package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/objstore"
)

// objectBytes builds object id's whole file of payloads.
func objectBytes(id uint64, payloads ...string) []byte {
	b := objstore.AppendObjectHeader(nil, id)
	for _, p := range payloads {
		b = objstore.AppendFrame(b, []byte(p))
	}
	return b
}

// serve runs NewHandler(cfg) on a test server and returns a request
// function answering the coded error of a refusal.
func serve(t *testing.T, cfg HandlerConfig) func(method, path string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	srv := httptest.NewServer(NewHandler(cfg))
	t.Cleanup(srv.Close)
	return func(method, path string, body []byte) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 {
			if ct := resp.Header.Get("Content-Type"); ct != frontend.ProblemContentType {
				t.Errorf("%s %s: %s answered as %q, not a problem", method, path, resp.Status, ct)
			}
			coded, err := errs.Unmarshal(got)
			if err != nil {
				t.Fatalf("%s %s: %s with a body that is no problem: %q", method, path, resp.Status, got)
			}
			return resp, got, coded
		}
		return resp, got, nil
	}
}

func openStore(t *testing.T, base uint64) *objstore.Store {
	t.Helper()
	s, err := objstore.Open(filepath.Join(t.TempDir(), "objects"), objstore.Options{IDBase: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHandlerPut: a copy is stored and answered 204, again as well; what
// is not a valid copy is refused with a coded problem and leaves nothing.
func TestHandlerPut(t *testing.T) {
	t.Parallel()
	s := openStore(t, 2<<48)
	do := serve(t, HandlerConfig{Store: s, MaxObjectBytes: 1 << 10})
	id := uint64(1<<48 + 5)
	good := objectBytes(id, "hello", "world")
	for range 2 { // the same copy twice: idempotent
		resp, _, err := do(http.MethodPut, objectPath(id), good)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT: %v, %v", resp.Status, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.Dir(), fmt.Sprintf("%016x.obj", id))); !bytes.Equal(got, good) {
		t.Fatal("the stored copy differs")
	}

	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	other := uint64(1<<48 + 6)
	for name, tc := range map[string]struct {
		path   string
		body   []byte
		want   *errs.Error
		status int
	}{
		"a path id not hex":          {ObjectsPath + "zz00000000000000", good, ReplicaID, 400},
		"a path id in upper case":    {ObjectsPath + "000100000000000A", good, ReplicaID, 400},
		"a short path id":            {ObjectsPath + "1", good, ReplicaID, 400},
		"id zero":                    {objectPath(0), objectBytes(0, "x"), ReplicaID, 400},
		"an id the member hands out": {objectPath(2<<48 + 100), objectBytes(2<<48+100, "x"), ReplicaID, 400},
		"a CRC that fails":           {objectPath(other), flipped, ReplicaRefused, 400},
		"another object's bytes":     {objectPath(other), good, ReplicaRefused, 400},
		"torn":                       {objectPath(other), good[:len(good)-3], ReplicaRefused, 400},
		"above the bound":            {objectPath(other), objectBytes(other, strings.Repeat("x", 2<<10)), ReplicaTooLarge, 413},
		"a different object":         {objectPath(id), objectBytes(id, "not hello"), ReplicaConflict, 409},
	} {
		resp, _, err := do(http.MethodPut, tc.path, tc.body)
		if !errors.Is(err, tc.want) || resp.StatusCode != tc.status {
			t.Errorf("%s: %s, %v; want %d %s", name, resp.Status, err, tc.status, tc.want.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), fmt.Sprintf("%016x.obj", other))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused copy left a file: %v", err)
	}
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".replica-") {
			t.Errorf("left aside: %s", e.Name())
		}
	}
	if resp, _, err := do(http.MethodPost, objectPath(id), good); resp.StatusCode != http.StatusMethodNotAllowed || !errors.Is(err, NoRoute) || resp.Header.Get("Allow") != http.MethodPut+", "+http.MethodGet {
		t.Errorf("POST: %s, %v", resp.Status, err)
	}
	if resp, _, err := do(http.MethodGet, ObjectsPath+"a/b/c", nil); resp.StatusCode != http.StatusNotFound || !errors.Is(err, NoRoute) {
		t.Errorf("GET of another path: %s, %v", resp.Status, err)
	}
}

// TestHandlerFrame: a frame is served raw, header included, after it
// checked; an absent object is 404 REPLICA_NOT_FOUND, a bad range 400, a
// copy that fails its check 500 REPLICA_CORRUPT.
func TestHandlerFrame(t *testing.T) {
	t.Parallel()
	s := openStore(t, 2<<48)
	do := serve(t, HandlerConfig{Store: s})
	id := uint64(1<<48 + 1)
	obj := objectBytes(id, "first", "second")
	if _, err := s.WriteReplica(id, bytes.NewReader(obj)); err != nil {
		t.Fatal(err)
	}
	pos, n := int64(objstore.HeaderSize+objstore.FrameHeaderSize+5), int64(objstore.FrameHeaderSize+6)
	resp, got, err := do(http.MethodGet, framePath(id, pos, n), nil)
	if err != nil || !bytes.Equal(got, obj[pos:pos+n]) {
		t.Fatalf("GET frame: %s %q %v", resp.Status, got, err)
	}
	for name, tc := range map[string]struct {
		path   string
		want   *errs.Error
		status int
	}{
		"an absent object":    {framePath(id+1, pos, n), ReplicaNotFound, 404},
		"inside the header":   {framePath(id, 3, n), BadFrameRange, 400},
		"a length of nothing": {framePath(id, pos, 2), BadFrameRange, 400},
		"no numbers":          {objectPath(id) + "/frame?pos=a&len=", BadFrameRange, 400},
		"a bad id":            {ObjectsPath + "x/frame?pos=16&len=9", ReplicaID, 400},
		"past the end":        {framePath(id, pos, n+10), ReplicaCorrupt, 500},
	} {
		resp, _, err := do(http.MethodGet, tc.path, nil)
		if !errors.Is(err, tc.want) || resp.StatusCode != tc.status {
			t.Errorf("%s: %s, %v; want %d %s", name, resp.Status, err, tc.status, tc.want.Name())
		}
	}
	// Corrupt the copy in place: it is not served.
	path := filepath.Join(s.Dir(), fmt.Sprintf("%016x.obj", id))
	obj[len(obj)-1] ^= 1
	if err := os.WriteFile(path, obj, 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, _, err := do(http.MethodGet, framePath(id, pos, n), nil); !errors.Is(err, ReplicaCorrupt) || resp.StatusCode != 500 {
		t.Fatalf("a corrupt copy: %s, %v", resp.Status, err)
	}
}

// TestHandlerRemovesPartialCopies: a copy a crash left half received is
// deleted when the handler starts.
func TestHandlerRemovesPartialCopies(t *testing.T) {
	t.Parallel()
	s := openStore(t, 2<<48)
	part := filepath.Join(s.Dir(), ".replica-0001000000000001-42")
	if err := os.WriteFile(part, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	Handler(s, nil)
	if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the partial copy is still there: %v", err)
	}
}
