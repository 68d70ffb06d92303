// Package benchdb gives a benchmark a fresh PostgreSQL database, so that
// each row measures an empty store.
package benchdb

import (
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// Postgres creates a database named prefix_<nanoseconds> on the server
// admin names (a DSN whose user may create databases) and returns its DSN.
// The database is left on the server: scripts/bench.sh throws the whole
// server away.
func Postgres(admin, prefix string) (string, error) {
	db, err := sql.Open("pgx", admin)
	if err != nil {
		return "", err
	}
	defer db.Close()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		return "", err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
