package platform

import (
	"fmt"
	"slices"
	"strings"
)

// orderDeps returns roots and everything they depend on, each after all of
// its dependencies (a depth-first post-order). The result depends only on
// the order of roots and of what deps returns, so it is deterministic.
func orderDeps(roots []string, deps func(string) ([]string, error)) ([]string, error) {
	const (
		visiting = 1
		visited  = 2
	)
	state := map[string]int{}
	var order, stack []string
	var visit func(n string) error
	visit = func(n string) error {
		switch state[n] {
		case visited:
			return nil
		case visiting:
			cycle := append(slices.Clone(stack[slices.Index(stack, n):]), n)
			return fmt.Errorf("dependency cycle: %s", strings.Join(cycle, " -> "))
		}
		state[n] = visiting
		stack = append(stack, n)
		ds, err := deps(n)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := visit(d); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = visited
		order = append(order, n)
		return nil
	}
	for _, r := range roots {
		if err := visit(r); err != nil {
			return nil, err
		}
	}
	return order, nil
}
