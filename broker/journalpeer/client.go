package journalpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/picomq/picomq/broker/journal"
)

// Doer sends a request to a peer and returns its answer, a refusal as its
// coded error (broker/peer.Client).
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
	URL(addr, path string) string
}

// Client calls other members' journals.
type Client struct {
	peers   Doer
	streams *streams // nil: objects go as HTTP requests
}

// NewClient returns a client sending everything through peers, an HTTP
// request each.
func NewClient(peers Doer) *Client { return &Client{peers: peers} }

// NewStreamingClient returns a client sending objects on append streams
// dialled with dial (stream.go), and fences and reads through peers; a
// member that serves no stream (an older build) is sent objects through
// peers.
func NewStreamingClient(peers Doer, dial StreamDialer) *Client {
	return &Client{peers: peers, streams: &streams{dial: dial, conns: map[string]*streamConn{}, old: map[string]time.Time{}}}
}

// Close breaks the client's append streams: objects awaiting an answer
// fail (outcome unknown).
func (c *Client) Close() {
	if c.streams != nil {
		c.streams.close()
	}
}

// Append sends o to the member at addr and returns once that member's
// journal has it durable, or its refusal (journal.Fenced,
// journal.Conflict, ...). An error that is no refusal (a timeout, a lost
// connection) says nothing of whether it was written: resend the same
// bytes, never other ones under the id.
func (c *Client) Append(ctx context.Context, addr string, o journal.Object) error {
	if c.streams != nil {
		err := c.streams.append(ctx, addr, o)
		if !errors.Is(err, errOldPeer) {
			return err
		}
	}
	resp, err := c.do(ctx, http.MethodPost, addr, Path+"objects", EncodeObject(o))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("journalpeer: append of object %d to %s: unexpected %s", o.ID, addr, resp.Status)
	}
	return nil
}

// Fence raises stream's fence to epoch at the member at addr and returns
// the parts of stream it holds from before the fence.
func (c *Client) Fence(ctx context.Context, addr string, stream uint64, epoch int64) ([]journal.Ref, error) {
	path := Path + "fences/" + strconv.FormatUint(stream, 10) + "/" + strconv.FormatInt(epoch, 10)
	body, err := c.body(ctx, http.MethodPost, addr, path)
	if err != nil {
		return nil, err
	}
	return DecodeRefs(body)
}

// Read returns object id as the member at addr holds it.
func (c *Client) Read(ctx context.Context, addr string, id uint64) (journal.Object, error) {
	body, err := c.body(ctx, http.MethodGet, addr, Path+"objects/"+strconv.FormatUint(id, 10))
	if err != nil {
		return journal.Object{}, err
	}
	o, err := DecodeObject(body)
	if err == nil && o.ID != id {
		err = BadObject.With("reason", fmt.Sprintf("asked for object %d, got %d", id, o.ID))
	}
	return o, err
}

func (c *Client) body(ctx context.Context, method, addr, path string) ([]byte, error) {
	resp, err := c.do(ctx, method, addr, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("journalpeer: %s %s at %s: unexpected %s", method, path, addr, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

func (c *Client) do(ctx context.Context, method, addr, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.peers.URL(addr, path), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	return c.peers.Do(req)
}
