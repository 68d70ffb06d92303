package cli

// Internals the black-box tests exercise directly (not export_test.go:
// export.go is the transfer export command).

// ParseSize is parseSize: a bare number is MiB.
var ParseSize = parseSize

// ParseByteSize reads a size as --max-message-bytes does: a bare number is
// bytes.
func ParseByteSize(s string) (uint64, error) { return parseSizeIn(s, 1) }
