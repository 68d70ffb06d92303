package catalog_test

import (
	"io"
	"os"
)

type ioReadCloser = io.ReadCloser

func nopCloser(r io.Reader) io.ReadCloser { return io.NopCloser(r) }

var osReadFile = os.ReadFile
