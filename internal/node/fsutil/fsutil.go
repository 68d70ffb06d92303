// Package fsutil holds the durable-write helpers the node agent's packages
// share.
package fsutil

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic writes data to dir/name through a temporary file in dir
// that is fsynced and renamed over name; dir is fsynced afterwards. A crash
// leaves either the old content or the new one under name.
func WriteFileAtomic(dir, name string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, making renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// SyncFile fsyncs the file at path.
func SyncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
