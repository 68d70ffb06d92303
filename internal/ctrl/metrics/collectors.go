package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// NodeSessions is kibotos_node_sessions_live: the node control sessions
// this ctrl holds when scraped (live reports the count; a Fleet's).
func NodeSessions(live func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kibotos_node_sessions_live",
		Help: "Node control sessions this ctrl holds now (with several replicas, each holds its own).",
	}, func() float64 { return float64(live()) })
}

// scrapeQueryTimeout bounds the database query of one scrape.
const scrapeQueryTimeout = 5 * time.Second

// Workspaces is kibotos_workspaces{state}: the Workspaces not deleted, by
// state, counted by one grouped query on a read transaction at each
// scrape (so every replica sharing a database reports the same numbers).
// Every state but DELETED is reported, zero when none is in it.
func Workspaces(st *store.Store) prometheus.Collector {
	return &workspaces{st: st, desc: prometheus.NewDesc("kibotos_workspaces",
		"Workspaces not deleted, by state (read from the database at scrape time).", []string{"state"}, nil)}
}

type workspaces struct {
	st   *store.Store
	desc *prometheus.Desc
}

func (w *workspaces) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

func (w *workspaces) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeQueryTimeout)
	defer cancel()
	var counts map[string]int64
	err := w.st.Tx(ctx, func(tx *store.Tx) error {
		var err error
		counts, err = tx.CountWorkspacesByState()
		return err
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(w.desc, err)
		return
	}
	for n, name := range ctrlv1.WorkspaceState_name {
		state := ctrlv1.WorkspaceState(n)
		if state == ctrlv1.WorkspaceState_WORKSPACE_STATE_UNSPECIFIED || state == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			continue
		}
		ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(counts[name]), StateLabel(name))
	}
}

// StateLabel is the state label of a WorkspaceState's name:
// WORKSPACE_STATE_AVAILABLE is "available".
func StateLabel(name string) string {
	return strings.ToLower(strings.TrimPrefix(name, "WORKSPACE_STATE_"))
}

// Store is kibotos_store_transactions_total and
// kibotos_store_transaction_seconds_total: the transactions ctrl's store
// began and the time they held a database connection (store.Stats), read
// at each scrape. The rate of the second is the database's busy share on
// SQLite (one connection); seconds over transactions is the mean time.
func Store(st *store.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kibotos_store_transactions_total",
			Help: "Database transactions ctrl began (each attempt of a retried one), committed or rolled back.",
		}, func() float64 { return float64(st.Stats().Transactions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kibotos_store_transaction_seconds_total",
			Help: "Time ctrl's transactions held a database connection, BEGIN to the end of COMMIT or ROLLBACK.",
		}, func() float64 { return st.Stats().Held.Seconds() }),
	}
}
