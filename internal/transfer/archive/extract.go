package archive

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Extract reads an archive from r into the directory dir, each part a
// file named by the part (created, never overwritten), block parts sparse.
// Files are opened through an os.Root of dir, so no part can reach outside
// it whatever its name. On any error the files it made are removed.
func Extract(r io.Reader, dir string, lim Limits) (_ *Manifest, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var made []*os.File
	var names []string
	defer func() {
		for _, f := range made {
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
		if err != nil {
			for _, n := range names {
				_ = root.Remove(n)
			}
		}
	}()
	m, err := Read(r, lim, func(_ int, p Part) (Sink, error) {
		f, err := root.OpenFile(p.Name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", p.Name, err)
		}
		made, names = append(made, f), append(names, p.Name)
		return f, nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range made {
		if err := f.Sync(); err != nil {
			return nil, errors.Join(fmt.Errorf("sync %s", f.Name()), err)
		}
	}
	return m, nil
}
