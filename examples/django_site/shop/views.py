"""A view that queues a task with soloist's sync API."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from shop.tasks import app, send_welcome


@csrf_exempt  # an API endpoint of the example; a real form keeps CSRF protection
@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    email = request.POST.get("email", "")
    if "@" not in email:
        return JsonResponse({"error": f"invalid email {email!r}"}, status=400)
    occurrence = app.enqueue(send_welcome, {"to": email})  # the workers run it once
    return JsonResponse({"occurrence": occurrence})
