package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
)

// FailsafePath is the peer route of failsafe rounds (ownership's package
// doc, "Failsafe"): a holder that cannot reach the API server asks every
// member of the metadata log's configuration to confirm it cannot either.
const FailsafePath = "/v1/peer/failsafe"

type failsafeRequest struct {
	// Holder is the asking broker's member identity.
	Holder string `json:"holder"`
}

type failsafeAnswer struct {
	// Member is the answering broker's identity: the holder checks it is
	// the one its configuration lists at that address.
	Member string `json:"member"`
	// Members is the answering broker's configuration: a member the
	// holder does not know of (added since its log's latest
	// configuration) has not been asked, and fails the round.
	Members []string `json:"members"`
}

// serveFailsafe answers another broker's failsafe round: the ownership
// manager confirms (and records its promise) only while this broker cannot
// reach the API server itself.
func (c *Cluster) serveFailsafe(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) {
		coded := frontend.Coded(err, "peer"+r.URL.Path)
		frontend.WriteProblem(w, r, c.log, coded, errs.HTTPStatus(coded))
	}
	var req failsafeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		fail(fmt.Errorf("failsafe round: %w", err))
		return
	}
	b := c.broker()
	if b == nil {
		fail(errors.New("failsafe round: this broker has not opened yet"))
		return
	}
	// The configuration first: an answer whose configuration cannot be
	// read is no confirmation, and then nothing is promised either.
	conf, err := b.Log().Configuration(r.Context())
	if err != nil {
		fail(err)
		return
	}
	if err := c.owners.AnswerFailsafe(req.Holder); err != nil {
		fail(err)
		return
	}
	ans := failsafeAnswer{Member: c.member.Identity().ID()}
	for _, s := range conf.Servers {
		ans.Members = append(ans.Members, s.ID)
	}
	body, _ := json.Marshal(ans)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// failsafeRound asks every other member of the metadata log's latest
// configuration, at once, to confirm this broker's failsafe round; nil
// only when each answered as the member its configuration names, with a
// configuration listing no member this one does not.
func (c *Cluster) failsafeRound(ctx context.Context) error {
	b := c.broker()
	if b == nil {
		return errors.New("failsafe round: the broker has not opened yet")
	}
	conf, err := b.Log().Configuration(ctx)
	if err != nil {
		return fmt.Errorf("failsafe round: the metadata log's configuration: %w", err)
	}
	self := c.member.Identity().ID()
	known := map[string]bool{}
	for _, s := range conf.Servers {
		known[s.ID] = true
	}
	if !known[self] {
		return fmt.Errorf("failsafe round: this broker (%s) is not in the metadata log's configuration", self)
	}
	raw, _ := json.Marshal(failsafeRequest{Holder: self})
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, s := range conf.Servers {
		if s.ID == self {
			continue
		}
		wg.Go(func() {
			err := c.askFailsafe(ctx, s.Address, s.ID, raw, known)
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", s.ID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("failsafe round not confirmed by %d of %d members: %s", len(failed), len(conf.Servers)-1, strings.Join(failed, "; "))
	}
	return nil
}

// askFailsafe sends one member the round and checks its answer.
func (c *Cluster) askFailsafe(ctx context.Context, addr, id string, raw []byte, known map[string]bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.client.URL(addr, FailsafePath), bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var ans failsafeAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		return fmt.Errorf("its answer: %w", err)
	}
	if ans.Member != id {
		return fmt.Errorf("answered as %q, not the member the configuration names at %s", ans.Member, addr)
	}
	for _, m := range ans.Members {
		if !known[m] {
			return fmt.Errorf("its configuration lists %s, which this broker's does not (a member added since): not asked", m)
		}
	}
	return nil
}
