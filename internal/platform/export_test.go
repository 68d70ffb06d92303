package platform

import "io"

// Internals the black-box tests exercise directly.

type CpioEntry = cpioEntry

const (
	ModeDir  = modeDir
	ModeReg  = modeReg
	ModeChar = modeChar
)

func NewCpioWriter(w io.Writer) *cpioWriter { return newCpioWriter(w) }

var OrderDeps = orderDeps

// ResolveModules resolves names in an unpacked lib/modules/<version>.
func ResolveModules(dir, version string, names []string) ([]string, error) {
	t, err := openModuleTree(dir, version)
	if err != nil {
		return nil, err
	}
	return t.resolve(names, nil)
}
