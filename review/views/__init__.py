"""The desk's views: permission check, form validation, one service call, a redirect or a partial.

Every view checks its permission server-side (a hidden button is not a permission). htmx
requests get the page's partial ("page.html#name"); without JavaScript, forms post and redirect.
One module per page family (`runs`, `queue`, `policies`, `notifications`, `tokens`,
`mcp_tools`); what they share with every dashboard page is dashboard.views.common. Every view
is a named function: an action's shared prologue is a decorator (`run_page_action`,
`queue_item_action`).
"""
