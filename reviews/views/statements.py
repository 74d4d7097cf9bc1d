"""The statements page: the provider's own records imported so far, and (operators, admins)
uploading one. Importing is `ledger.statements.import_statement`; this page only hands it the
uploaded file as a stream and shows what it did."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from ledger.models import StatementImport
from ledger.models.statements import Origin
from ledger.statements import StatementError, import_statement
from reviews.access.checks import actor, can_act, reader
from reviews.records.statements import imports_page, statement_tools

PAGE_SIZE = 25
# An uploaded file may be this large at most (`SizeLimit`). Django's DATA_UPLOAD_MAX_MEMORY_SIZE
# leaves files out, and a statement is parsed as a stream, so the limit is only about disk.
STATEMENT_MAX_BYTES = 200 * 1024 * 1024


class UTCDateTimeField(forms.DateTimeField):
    """A `datetime-local` input, read as UTC (the form says so) whatever the server's zone."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")

    def to_python(self, value: Any) -> datetime | None:
        with timezone.override(UTC):
            return super().to_python(value)


class StatementUploadForm(forms.Form):
    tool = forms.ChoiceField(label="Tool")
    file = forms.FileField(
        label="Statement file",
        help_text="CSV or JSON Lines (.csv, .jsonl), as the provider sent it",
        error_messages={"required": "Choose the statement file to upload."},
    )
    period_start = UTCDateTimeField(label="Period start (UTC)")
    period_end = UTCDateTimeField(label="Period end (UTC, not included)")
    provisional = forms.BooleanField(
        label="Provisional: the provider may still change it (it proves no absence)",
        required=False,
    )

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only tools that declare statements, of the person's teams or of no team (ADR 0014);
        # another name, another team's tool included, is refused as a wrong choice.
        self.fields["tool"].choices = [(n, n) for n in statement_tools(user)]
        self.fields["file"].widget.attrs["accept"] = ".csv,.jsonl,.ndjson"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("period_start"), data.get("period_end")
        if start and end and end <= start:
            self.add_error("period_end", "The period must end after it starts.")
        return data


class SizeLimit(FileUploadHandler):
    """Stops taking an upload once it passes STATEMENT_MAX_BYTES: the rest of the request is
    read and thrown away, never written to a temporary file."""

    def __init__(self, request: HttpRequest) -> None:
        super().__init__(request)
        self.received = 0
        self.exceeded = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > STATEMENT_MAX_BYTES:
            self.exceeded = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler (memory or temporary file) makes the file


def _page(
    request: HttpRequest, form: StatementUploadForm | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "form": form
        or (
            StatementUploadForm(auto_id="stmt_%s", user=request.user)
            if can_act(request.user)
            else None
        ),
        # Statements of other teams' tools are not shown (ADR 0014).
        "page": imports_page(request.user, request.GET.get("page"), PAGE_SIZE),
        "max_mib": STATEMENT_MAX_BYTES // 2**20,
    }
    return render(request, "reviews/statements.html", context, status=status)


@require_GET
@reader
def statements(request: HttpRequest) -> HttpResponse:
    return _page(request)


# Exempt only so that the size limit is in place before anything reads the body (the CSRF
# check reads the form); `_upload` checks the token itself.
@csrf_exempt
@require_POST
def upload(request: HttpRequest) -> HttpResponse:
    limit = SizeLimit(request)
    request.upload_handlers.insert(0, limit)
    return _upload(request, limit)


@actor
@csrf_protect
def _upload(request: HttpRequest, limit: SizeLimit) -> HttpResponse:
    form = StatementUploadForm(request.POST, request.FILES, auto_id="stmt_%s", user=request.user)
    if limit.exceeded:
        form.is_valid()
        form.errors.pop("file", None)
        form.add_error("file", f"The file is larger than {STATEMENT_MAX_BYTES // 2**20} MiB.")
        return _page(request, form, 413)
    if not form.is_valid():
        return _page(request, form, 422)
    data = form.cleaned_data
    uploaded = data["file"]
    try:
        made = import_statement(
            data["tool"],
            uploaded,
            filename=uploaded.name,
            period_start=data["period_start"],
            period_end=data["period_end"],
            provisional=data["provisional"],
            by=f"operator:{request.user.get_username()}",
            origin=Origin.UPLOAD,
        )
    except StatementError as exc:
        form.add_error(None, f"Refused, nothing was imported: {exc}")
        return _page(request, form, 422)
    messages.success(request, _summary(made))
    return redirect("statements")


def _summary(made: StatementImport) -> str:
    counts: list[tuple[int, str]] = [
        (made.confirmed, "confirmed"),
        (made.failed, "failed"),
        (made.retried, "sent back to planned"),
        (made.reviews, "review items"),
        (made.duplicates, "duplicates"),
        (made.orphans, "orphan incidents"),
    ]
    done = ", ".join(f"{what} {n}" for n, what in counts)
    kind = "provisional" if made.provisional else "final"
    return (
        f"Imported {made.filename} ({kind}, {made.tool}) as import {made.pk}: {made.lines} "
        f"line{'s' if made.lines != 1 else ''}, {made.lines_matched} matched to effects; {done}."
    )
