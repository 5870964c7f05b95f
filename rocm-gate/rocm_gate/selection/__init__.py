"""PR test selection: from the files a change touches to the groups and test paths it needs, each
with why.

`cochange` learns which test folders change together with which source paths from a repository's
history; `select` combines that with the group map's rules (`sources` per rule, `[selection]`
everything/ignore) and says what to run (`rocm-gate select`); `git` reads what they need from a
checkout (commits, a range's files, first-parent history, a commit's tree)."""

__all__ = ["cochange", "git", "select"]
