from __future__ import annotations

from django.contrib import admin

from reviews.models import ReviewItem


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    list_display = ("effect", "reason", "opened_at", "due_at", "assignee", "resolved_at")
    list_filter = ("reason", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("=effect__id", "effect__effect_key")
    readonly_fields = ("effect", "reason", "opened_at")
    list_select_related = ("effect", "assignee")
