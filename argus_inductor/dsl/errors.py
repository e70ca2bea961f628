"""The one exception type a DSL program's author sees."""
from __future__ import annotations


class DSLError(Exception):
    """A mistake in a DSL kernel, raised when the kernel is defined (or specialized).

    Carries the kernel's file and line, the offending source line, what is wrong in one
    sentence, and how to fix it in one sentence.
    """

    def __init__(self, message: str, *, fix: str, line: int | None = None, filename: str | None = None,
                 source_line: str | None = None, kernel: str | None = None) -> None:
        self.message = message
        self.fix = fix
        self.line = line
        self.filename = filename
        self.source_line = source_line
        self.kernel = kernel
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.filename or self.line:
            where = f"{self.filename or '<kernel>'}:{self.line or '?'}: "
        text = f"{where}{self.message}"
        if self.kernel:
            text += f" (in kernel '{self.kernel}')"
        if self.source_line:
            text += f"\n    {self.source_line.strip()}"
        text += f"\n  fix: {self.fix}"
        return text

    def located(self, *, line: int | None, filename: str | None, source_line: str | None,
                kernel: str | None) -> DSLError:
        """Fill in location fields that the raiser did not know."""
        return DSLError(self.message, fix=self.fix, line=self.line or line, filename=self.filename or filename,
                        source_line=self.source_line or source_line, kernel=self.kernel or kernel)


class LaunchError(Exception):
    """A kernel was launched with arguments that do not fit its declaration."""
