package store

import (
	"database/sql"
	"fmt"
	"strings"
)

// What a row reserves in its pool, as SQL over a trigger's OLD or NEW row
// ({{R}}): a living Volume its capacity, a writable layer its capacity
// while its Workspace ({{W}}, a workspaces row) lives. These are the same
// conditions as volumeLives and workspaceLives.
const (
	volumeReserves     = "(CASE WHEN {{R}}.state NOT IN ('VOLUME_STATE_DELETING', 'VOLUME_STATE_DELETED') THEN {{R}}.capacity_bytes ELSE 0 END)"
	workspaceLiving    = "{{W}}.state NOT IN ('WORKSPACE_STATE_DELETING', 'WORKSPACE_STATE_DELETED')"
	layerOfRuntime     = "COALESCE((SELECT {{R}}.layer_capacity_bytes FROM workspaces w WHERE w.workspace_id = {{R}}.workspace_id AND w.state NOT IN ('WORKSPACE_STATE_DELETING', 'WORKSPACE_STATE_DELETED')), 0)"
	runtimeOfWorkspace = "COALESCE((SELECT r.layer_capacity_bytes FROM workspace_runtime r WHERE r.workspace_id = {{W}}.workspace_id), 0)"
	poolOfWorkspace    = "(SELECT r.layer_pool FROM workspace_runtime r WHERE r.workspace_id = {{W}}.workspace_id)"
)

func fill(expr, r, w string) string {
	return strings.NewReplacer("{{R}}", r, "{{W}}", w).Replace(expr)
}

// reservedTriggers are the statements that keep pool_reserved in d. Each
// trigger fires only when what a row reserves, or where, changed, so the
// many writes that change neither (observations, labels, progress) leave
// the counter row alone: on PostgreSQL that row is locked by whoever
// moves it until their transaction ends.
func reservedTriggers(d dialect) []string {
	if d.name == postgres.name {
		return postgresReservedTriggers()
	}
	return sqliteReservedTriggers()
}

func sqliteReservedTriggers() []string {
	add := func(pool, bytes string) string {
		return fmt.Sprintf(`INSERT INTO pool_reserved (storage_pool, bytes) SELECT %s, %s WHERE %s IS NOT NULL AND %s <> 0
			ON CONFLICT (storage_pool) DO UPDATE SET bytes = pool_reserved.bytes + excluded.bytes;`, pool, bytes, pool, bytes)
	}
	volOld, volNew := fill(volumeReserves, "OLD", ""), fill(volumeReserves, "NEW", "")
	layerOld, layerNew := fill(layerOfRuntime, "OLD", ""), fill(layerOfRuntime, "NEW", "")
	wsOld, wsNew := fill(workspaceLiving, "", "OLD"), fill(workspaceLiving, "", "NEW")
	return []string{
		`CREATE TRIGGER volumes_reserved_insert AFTER INSERT ON volumes BEGIN ` + add("NEW.storage_pool", volNew) + ` END`,
		`CREATE TRIGGER volumes_reserved_update AFTER UPDATE ON volumes
			WHEN OLD.storage_pool IS NOT NEW.storage_pool OR ` + volOld + ` <> ` + volNew + ` BEGIN ` +
			add("OLD.storage_pool", "-"+volOld) + add("NEW.storage_pool", volNew) + ` END`,
		`CREATE TRIGGER volumes_reserved_delete AFTER DELETE ON volumes BEGIN ` + add("OLD.storage_pool", "-"+volOld) + ` END`,
		`CREATE TRIGGER runtime_reserved_insert AFTER INSERT ON workspace_runtime BEGIN ` + add("NEW.layer_pool", layerNew) + ` END`,
		`CREATE TRIGGER runtime_reserved_update AFTER UPDATE ON workspace_runtime
			WHEN OLD.layer_pool IS NOT NEW.layer_pool OR OLD.layer_capacity_bytes <> NEW.layer_capacity_bytes BEGIN ` +
			add("OLD.layer_pool", "-"+layerOld) + add("NEW.layer_pool", layerNew) + ` END`,
		`CREATE TRIGGER runtime_reserved_delete AFTER DELETE ON workspace_runtime BEGIN ` + add("OLD.layer_pool", "-"+layerOld) + ` END`,
		`CREATE TRIGGER workspaces_reserved_insert AFTER INSERT ON workspaces WHEN ` + wsNew + ` BEGIN ` +
			add(fill(poolOfWorkspace, "", "NEW"), fill(runtimeOfWorkspace, "", "NEW")) + ` END`,
		`CREATE TRIGGER workspaces_reserved_update AFTER UPDATE ON workspaces WHEN (` + wsOld + `) <> (` + wsNew + `) BEGIN ` +
			add(fill(poolOfWorkspace, "", "NEW"), "(CASE WHEN "+wsNew+" THEN 1 ELSE -1 END) * "+fill(runtimeOfWorkspace, "", "NEW")) + ` END`,
		`CREATE TRIGGER workspaces_reserved_delete AFTER DELETE ON workspaces WHEN ` + wsOld + ` BEGIN ` +
			add(fill(poolOfWorkspace, "", "OLD"), "-"+fill(runtimeOfWorkspace, "", "OLD")) + ` END`,
	}
}

// postgresReservedTriggers are the same on PostgreSQL, where a trigger
// runs a function: one per table, for each operation. The conditions are
// in the functions, not in the triggers' WHEN clauses: a column a WHEN
// clause names cannot have its collation changed (byteOrder) afterwards.
func postgresReservedTriggers() []string {
	volOld, volNew := fill(volumeReserves, "OLD", ""), fill(volumeReserves, "NEW", "")
	layerOld, layerNew := fill(layerOfRuntime, "OLD", ""), fill(layerOfRuntime, "NEW", "")
	wsOld, wsNew := fill(workspaceLiving, "", "OLD"), fill(workspaceLiving, "", "NEW")
	function := func(table, name, body string) []string {
		return []string{
			`CREATE FUNCTION ` + name + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` + body + ` RETURN NULL; END $$`,
			`CREATE TRIGGER ` + name + ` AFTER INSERT OR UPDATE OR DELETE ON ` + table + ` FOR EACH ROW EXECUTE FUNCTION ` + name + `()`,
		}
	}
	// moved is the body of a table whose rows reserve bytes in pool:
	// a row that stays in its pool moves the counter by the difference.
	moved := func(pool, old, new string) string {
		return `IF TG_OP = 'UPDATE' AND OLD.` + pool + ` = NEW.` + pool + ` THEN
				PERFORM pool_reserved_add(NEW.` + pool + `, (` + new + `) - (` + old + `));
			ELSE
				IF TG_OP <> 'INSERT' THEN PERFORM pool_reserved_add(OLD.` + pool + `, -(` + old + `)); END IF;
				IF TG_OP <> 'DELETE' THEN PERFORM pool_reserved_add(NEW.` + pool + `, ` + new + `); END IF;
			END IF;`
	}
	out := []string{
		`CREATE FUNCTION pool_reserved_add(pool TEXT, delta BIGINT) RETURNS void LANGUAGE plpgsql AS $$ BEGIN
			IF pool IS NOT NULL AND delta <> 0 THEN
				INSERT INTO pool_reserved (storage_pool, bytes) VALUES (pool, delta)
				ON CONFLICT (storage_pool) DO UPDATE SET bytes = pool_reserved.bytes + excluded.bytes;
			END IF; END $$`,
	}
	out = append(out, function("volumes", "volumes_reserved", moved("storage_pool", volOld, volNew))...)
	out = append(out, function("workspace_runtime", "runtime_reserved", moved("layer_pool", layerOld, layerNew))...)
	return append(out, function("workspaces", "workspaces_reserved", `
			IF TG_OP <> 'INSERT' AND `+wsOld+` AND NOT (TG_OP = 'UPDATE' AND `+wsNew+`) THEN
				PERFORM pool_reserved_add(`+fill(poolOfWorkspace, "", "OLD")+`, -`+fill(runtimeOfWorkspace, "", "OLD")+`);
			END IF;
			IF TG_OP <> 'DELETE' AND `+wsNew+` AND NOT (TG_OP = 'UPDATE' AND `+wsOld+`) THEN
				PERFORM pool_reserved_add(`+fill(poolOfWorkspace, "", "NEW")+`, `+fill(runtimeOfWorkspace, "", "NEW")+`);
			END IF;`)...)
}

// backfillPoolReserved (migration 14) makes pool_reserved's triggers and
// fills it from the objects already living in their pools.
func backfillPoolReserved(tx *sql.Tx, d dialect) error {
	for _, stmt := range reservedTriggers(d) {
		if _, err := tx.Exec(stmt); err != nil {
			return fmt.Errorf("%w in %s", err, stmt)
		}
	}
	_, err := tx.Exec(`INSERT INTO pool_reserved (storage_pool, bytes)
		SELECT pool, CAST(SUM(b) AS BIGINT) FROM (
			SELECT storage_pool AS pool, capacity_bytes AS b FROM volumes WHERE ` + volumeLives + `
			UNION ALL
			SELECT r.layer_pool AS pool, r.layer_capacity_bytes AS b FROM workspace_runtime r
				JOIN workspaces w ON w.workspace_id = r.workspace_id WHERE ` + workspaceLives + `
		) objects GROUP BY pool`)
	return err
}
