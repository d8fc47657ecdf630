package brokerstat

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

func TestMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `# HELP picomq_x_total x
picomq_x_total{result="ok"} 3
picomq_x_total{result="failed"} 2
picomq_x_total_other 100
picomq_y 7.5
`)
	}))
	defer srv.Close()
	for _, c := range []struct {
		name, label string
		want        float64
		fail        string
	}{
		{"picomq_x_total", "", 5, ""},
		{"picomq_x_total", `result="ok"`, 3, ""},
		{"picomq_y", "", 7.5, ""},
		{"picomq_x_total", `result="gone"`, 0, "no sample"},
		{"picomq_z", "", 0, "no sample"},
	} {
		got, err := Metric(srv.URL, c.name, c.label)
		if c.fail == "" && (err != nil || got != c.want) || c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)) {
			t.Errorf("Metric(%s, %q) = %v, %v; want %v (error %q)", c.name, c.label, got, err, c.want, c.fail)
		}
	}
}

func TestTier(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wire.TierPath {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"enabled":true,"bucket":"b","reachable":true,"uploadsPending":2}`)
	}))
	defer srv.Close()
	st, err := Tier(srv.URL)
	if err != nil || !st.Enabled || st.Bucket != "b" || !st.Reachable || st.UploadsPending != 2 {
		t.Fatalf("Tier = %+v, %v", st, err)
	}
	if _, err := Tier(srv.URL + "/elsewhere"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Tier of a path that is not a broker's: %v, want the 404", err)
	}
}
