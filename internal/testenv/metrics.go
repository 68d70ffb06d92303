package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape GETs url (a /metrics) with a bearer token ("" sends none) and
// returns the response's status and body.
func Scrape(t testing.TB, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// ParseMetrics parses Prometheus's text exposition format.
func ParseMetrics(t testing.TB, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse the exposition: %v\n%s", err, body)
	}
	return families
}

// MetricValue is the value (counter, gauge, a histogram's count) of family
// name's series whose labels include labels; found says one exists.
func MetricValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, found bool) {
	f := families[name]
	for _, s := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, want := range labels {
			ok = ok && have[k] == want
		}
		if !ok {
			continue
		}
		switch {
		case s.GetCounter() != nil:
			return s.GetCounter().GetValue(), true
		case s.GetGauge() != nil:
			return s.GetGauge().GetValue(), true
		case s.GetHistogram() != nil:
			return float64(s.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
