// Package archmap holds the code to the map of docs/ARCHITECTURE.md: its
// tests read the Packages and Layers tables of that file and fail when a
// package the map names is gone, when a package of the module is missing
// from it, or when an import points sideways or up a layer. It has no
// code of its own.
package archmap
