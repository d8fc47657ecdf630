package clusterharness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// drainCall sends one request to broker i's drain endpoint and decodes its
// answer; a POST carries opts.
func (c *Cluster) drainCall(ctx context.Context, i int, method string, opts wire.DrainOptions) (wire.DrainStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		raw, err := json.Marshal(opts)
		if err != nil {
			return wire.DrainStatus{}, err
		}
		body = bytes.NewReader(raw)
	}
	url := c.URL(i) + wire.DrainPath
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return wire.DrainStatus{}, err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return wire.DrainStatus{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return wire.DrainStatus{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return wire.DrainStatus{}, fmt.Errorf("%s %s: %s: %.300s", method, url, resp.Status, raw)
	}
	var ds wire.DrainStatus
	if err := json.Unmarshal(raw, &ds); err != nil {
		return wire.DrainStatus{}, fmt.Errorf("%s %s: %v: %.300s", method, url, err, raw)
	}
	return ds, nil
}

// Drain asks broker i to drain to leave the cluster (POST
// /v1/admin/drain, as the operator's scale down does) and returns what it
// answered.
func (c *Cluster) Drain(ctx context.Context, i int) (wire.DrainStatus, error) {
	return c.drainCall(ctx, i, http.MethodPost, wire.DrainOptions{})
}

// Cordon asks broker i to hand its slots off and stay a member (POST
// /v1/admin/drain with stay).
func (c *Cluster) Cordon(ctx context.Context, i int) (wire.DrainStatus, error) {
	return c.drainCall(ctx, i, http.MethodPost, wire.DrainOptions{Stay: true})
}

// DrainStatus asks broker i where its drain stands (GET /v1/admin/drain).
func (c *Cluster) DrainStatus(ctx context.Context, i int) (wire.DrainStatus, error) {
	return c.drainCall(ctx, i, http.MethodGet, wire.DrainOptions{})
}

// CancelDrain makes broker i a full member again (DELETE /v1/admin/drain).
func (c *Cluster) CancelDrain(ctx context.Context, i int) (wire.DrainStatus, error) {
	return c.drainCall(ctx, i, http.MethodDelete, wire.DrainOptions{})
}

// DrainAndWait drains broker i to leave and waits, for at most timeout,
// until it reports Drained and the others are ready without it.
func (c *Cluster) DrainAndWait(i int, timeout time.Duration) error {
	if _, err := c.Drain(context.Background(), i); err != nil {
		return err
	}
	return c.WaitFor(timeout, fmt.Sprintf("%s drained", c.brokers[i].Name), func(ctx context.Context) error {
		ds, err := c.DrainStatus(ctx, i)
		if err != nil {
			return err
		}
		if ds.Phase != wire.DrainDrained {
			return fmt.Errorf("%s: drain %+v", c.brokers[i].Name, ds)
		}
		return nil
	})
}

// CordonAndWait cordons broker i and waits, for at most timeout, until it
// holds no slot and has no stream open, and the cluster is ready with the
// others holding every slot (ClusterReady): from then on broker i owns
// none of the streams, and every request sent to it is proxied.
func (c *Cluster) CordonAndWait(i int, timeout time.Duration) error {
	if _, err := c.Cordon(context.Background(), i); err != nil {
		return err
	}
	return c.WaitFor(timeout, fmt.Sprintf("%s cordoned", c.brokers[i].Name), func(ctx context.Context) error {
		ds, err := c.DrainStatus(ctx, i)
		if err != nil {
			return err
		}
		if ds.Phase != wire.DrainDraining || ds.SlotsHeld != 0 || ds.OpenStreams != 0 {
			return fmt.Errorf("%s: drain %+v", c.brokers[i].Name, ds)
		}
		n, err := c.Node(i)
		if err != nil {
			return err
		}
		if count, _, ok := n.Slots(); !ok || count != 0 {
			return fmt.Errorf("%s reports slotsHeld %s", c.brokers[i].Name, n.SlotsRaw)
		}
		return c.ClusterReady(ctx)
	})
}
