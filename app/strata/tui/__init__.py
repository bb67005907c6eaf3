"""strata's Textual front. Import `StrataApp` from `strata.tui.app`; the core never imports this
package."""
