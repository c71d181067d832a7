package console

import "embed"

// assets are the console's pages, scripts and styles, served under / and
// /assets/; nothing is fetched from elsewhere.
//
//go:embed assets
var assets embed.FS
