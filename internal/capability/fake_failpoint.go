//go:build failpoint

package capability

// A ctrl built for the commit-point test (the failpoint build tag, never a
// release) places Workspaces on nodes running the fake VM provider
// (internal/node/vm/fake), so that the test walks every crash point of a
// create, start and delete in seconds instead of booting a real VM at each
// (docs/RELIABILITY.md, "Failpoints and the commit-point test"). A
// production ctrl never does: provider.fake is not in its Providers.
func init() { Providers = append(Providers, Provider("fake")) }
