package brokeradmin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/tier"
)

// The broker's GET /v1/admin/tier answer, encoded with its wire type (and
// as the JSON the brief of the endpoint spells it), decodes to what the
// operator reports; a broker without the endpoint is ErrNotSupported.
func TestTierDecodesTheBrokersAnswer(t *testing.T) {
	t.Parallel()
	if CodeTierUnreachable != tier.Unreachable.Name() || CodeTierRefused != tier.Refused.Name() {
		t.Fatalf("the operator's tier codes differ from the broker's")
	}
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	want := wire.TierStatus{Enabled: true, Endpoint: "https://s3.example.com", Bucket: "b-1", Reachable: false,
		LastError: &wire.TierError{Code: CodeTierRefused, Message: "AccessDenied"}, LastSuccess: &now,
		UploadsPending: 3, UploadsFailed: 9, TieredBytes: 1 << 40}
	var asked string
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		asked = r.Method + " " + r.URL.Path
		w.Header().Set("Content-Type", wire.JSONContentType)
		_ = json.NewEncoder(w).Encode(want)
	})
	a := NewHTTP()
	got, err := a.Tier(context.Background(), b)
	if err != nil || asked != "GET /v1/admin/tier" {
		t.Fatalf("Tier: %v (asked %q)", err, asked)
	}
	if got.LastSuccess == nil || !got.LastSuccess.Equal(now) {
		t.Errorf("lastSuccess %v, want %v", got.LastSuccess, now)
	}
	if got.Reachable || got.LastError == nil || got.LastError.Code != CodeTierRefused || got.TieredBytes != 1<<40 || got.UploadsPending != 3 || !got.Enabled {
		t.Errorf("Tier = %+v", got)
	}

	// The literal shape: lastError null, lastSuccess "".
	lit := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.JSONContentType)
		_, _ = w.Write([]byte(`{"enabled":true,"endpoint":"http://minio:9000","bucket":"b","reachable":true,"lastError":null,"lastSuccess":"","uploadsPending":0,"uploadsFailed":0,"tieredBytes":5}`))
	})
	if got, err := a.Tier(context.Background(), lit); err != nil || !got.Reachable || got.LastError != nil || got.LastSuccess != nil || got.TieredBytes != 5 {
		t.Errorf("Tier = %+v, %v", got, err)
	}

	old := serve(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	if _, err := a.Tier(context.Background(), old); !IsNotSupported(err) {
		t.Errorf("a broker without the endpoint: %v, want ErrNotSupported", err)
	}
}
