// Package apispec holds the test that the .proto files keep every name and
// number of the API reference in ../shared/spec (the wire contract).
package apispec
