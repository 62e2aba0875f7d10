"""Notifications: who hears about hoarding episodes (the ``alerts`` app writes them), and how.

Receivers, routes, contacts and the delivery outbox (``models``), scanned from episodes, sent, and
mirrored to Alertmanager.

``outbox.scan`` writes the ``Delivery`` rows episodes need (fired, escalated, resolved, renotify),
``send.send_due`` sends what is due and records every attempt, ``alertmanager.refresh`` keeps
Alertmanager's open alerts alive. ``run_notifications`` does the three in that order within one
deadline (``notify``); the beat task ``notifications.tasks.send_notifications`` calls it every
minute. Nothing here runs inside collection or evaluation: a slow receiver delays only the next
notification.

The rest of the app: ``routing`` (routes -> receivers), ``messages`` (what each kind of
receiver is sent; pure), ``recipients`` (email addresses), ``transports`` (SMTP and HTTP with
deadlines and the transient/permanent split), ``explain`` (a failed test delivery as a sentence
for the admin).
"""
