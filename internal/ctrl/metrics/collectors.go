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
	var counts map[string]int64
	err := readTx(w.st, func(tx *store.Tx) error {
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

// Store is kibotos_store_transactions_total,
// kibotos_store_commits_total and kibotos_store_transaction_seconds_total:
// the transactions ctrl's store began, the database commits they took (on
// SQLite concurrent transactions share one) and the time they held a
// database connection (store.Stats), read at each scrape. The rate of the second is the database's busy share on
// SQLite (one connection); seconds over transactions is the mean time.
func Store(st *store.Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kibotos_store_transactions_total",
			Help: "Database transactions ctrl began (each attempt of a retried one), committed or rolled back.",
		}, func() float64 { return float64(st.Stats().Transactions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kibotos_store_commits_total",
			Help: "Database commits ctrl made; on SQLite, transactions that arrive together share one commit.",
		}, func() float64 { return float64(st.Stats().Commits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kibotos_store_transaction_seconds_total",
			Help: "Time ctrl's transactions held a database connection, BEGIN to the end of COMMIT or ROLLBACK.",
		}, func() float64 { return st.Stats().Held.Seconds() }),
	}
}

// readTx runs fn on a transaction bounded by scrapeQueryTimeout.
func readTx(st *store.Store, fn func(tx *store.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeQueryTimeout)
	defer cancel()
	return st.Tx(ctx, fn)
}

// QueueDepth is kibotos_command_queue_depth: the unfinished commands due
// now (a runner may take them, or holds them), counted by one query at
// each scrape. It is the database's, shared by every replica.
func QueueDepth(st *store.Store) prometheus.Collector {
	desc := prometheus.NewDesc("kibotos_command_queue_depth",
		"Unfinished commands due now (waiting for a runner's worker or held by one), read from the database at scrape time.", nil, nil)
	return newCollector(func(ch chan<- prometheus.Metric) {
		var n int64
		err := readTx(st, func(tx *store.Tx) error {
			var err error
			n, err = tx.CountDueCommands(time.Now())
			return err
		})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(desc, err)
			return
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n))
	}, desc)
}

// maxScrapedPools bounds the pools one scrape reports: pools are declared
// by operators and nodes, a handful in a deployment.
const maxScrapedPools = 1000

// Pools is kibotos_storage_pool_capacity_bytes{pool} and
// kibotos_storage_pool_reserved_bytes{pool}: each pool's capacity (0 while
// the operator set none) and what is reserved in it (the declared
// capacities of the Volumes and writable layers living there and of those
// moving in), read from the database at each scrape in one transaction.
func Pools(st *store.Store) prometheus.Collector {
	capacity := prometheus.NewDesc("kibotos_storage_pool_capacity_bytes",
		"A storage pool's capacity, what placement admits against (0 while none is set), read from the database at scrape time.", []string{"pool"}, nil)
	reserved := prometheus.NewDesc("kibotos_storage_pool_reserved_bytes",
		"The declared capacities of what lives in a storage pool and of what moves into it, read from the database at scrape time.", []string{"pool"}, nil)
	return newCollector(func(ch chan<- prometheus.Metric) {
		type row struct {
			name               string
			capacity, reserved uint64
		}
		var rows []row
		err := readTx(st, func(tx *store.Tx) error {
			rows = rows[:0]
			pools, err := tx.ListStoragePools("", maxScrapedPools)
			if err != nil {
				return err
			}
			for _, p := range pools {
				r, err := tx.StoragePoolReserved(p.Name)
				if err != nil {
					return err
				}
				rows = append(rows, row{p.Name, p.CapacityBytes, r})
			}
			return nil
		})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(capacity, err)
			return
		}
		for _, r := range rows {
			ch <- prometheus.MustNewConstMetric(capacity, prometheus.GaugeValue, float64(r.capacity), r.name)
			ch <- prometheus.MustNewConstMetric(reserved, prometheus.GaugeValue, float64(r.reserved), r.name)
		}
	}, capacity, reserved)
}

// GuestCounts is what a ctrl's node sessions last heard of the guests
// running on their nodes.
type GuestCounts struct {
	Running, Unresponsive, MemorySaturated int
	// MemoryKills sums each running guest's kills since it booted.
	MemoryKills uint64
}

// Guests is kibotos_guests_running, kibotos_guests_unresponsive,
// kibotos_guests_memory_saturated and kibotos_guest_memory_kills: read at
// each scrape from the newest observations of the sessions this ctrl
// holds (counts reports; a Fleet's).
func Guests(counts func() GuestCounts) prometheus.Collector {
	running := prometheus.NewDesc("kibotos_guests_running", "Executions running on the nodes whose sessions this ctrl holds, as their newest observation says.", nil, nil)
	unresponsive := prometheus.NewDesc("kibotos_guests_unresponsive", "Of those, guests that did not answer their node's latest probe (not counting one coming back from a reset).", nil, nil)
	saturated := prometheus.NewDesc("kibotos_guests_memory_saturated", "Of those, responding guests that judge their processes' memory SATURATED.", nil, nil)
	kills := prometheus.NewDesc("kibotos_guest_memory_kills", "Processes those guests killed since they booted because memory stayed saturated, summed (a gauge: it drops when a guest stops).", nil, nil)
	return newCollector(func(ch chan<- prometheus.Metric) {
		c := counts()
		ch <- prometheus.MustNewConstMetric(running, prometheus.GaugeValue, float64(c.Running))
		ch <- prometheus.MustNewConstMetric(unresponsive, prometheus.GaugeValue, float64(c.Unresponsive))
		ch <- prometheus.MustNewConstMetric(saturated, prometheus.GaugeValue, float64(c.MemorySaturated))
		ch <- prometheus.MustNewConstMetric(kills, prometheus.GaugeValue, float64(c.MemoryKills))
	}, running, unresponsive, saturated, kills)
}

// collectorFunc is a collector of descs whose metrics collect makes at
// each scrape.
type collectorFunc struct {
	collect func(ch chan<- prometheus.Metric)
	descs   []*prometheus.Desc
}

func newCollector(collect func(ch chan<- prometheus.Metric), descs ...*prometheus.Desc) collectorFunc {
	return collectorFunc{collect: collect, descs: descs}
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
