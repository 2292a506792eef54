//! `/marketplace` (curated, flea and my tabs; search; recent / most used / trending, each
//! card with its 30-day usage and trend) and `/marketplace/item` (one item's zero-filled
//! 30-day series): the same [`svc_marketplace::Marketplace`] reads as
//! `/api/marketplace/items`, `/plugins/…` and `/flea/…`.

use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Request, Response};
use svc_pages::views::{Choice, MarketCard, MarketItemPage, MarketplacePage, Tab};
use svc_pages::Page;
use svc_store::marketplace::{ItemsQuery, MarketTab};

use super::session::urlencode;
use super::{query, respond, session};
use crate::api::marketplace::sort_of;
use crate::state::AppState;

const PAGE_ITEMS: u64 = 24;
const SORTS: [(&str, &str); 3] = [
    ("recent", "Most recent"),
    ("most_used", "Most used"),
    ("trending", "Trending"),
];

/// `▲ 12%` and its style; a dash below the trend's minimum sample.
fn trend(pct: Option<f64>) -> (String, &'static str) {
    match pct {
        Some(p) if p > 0.0 => (format!("▲ {p:.0}%"), "trend-up"),
        Some(p) if p < 0.0 => (format!("▼ {:.0}%", -p), "trend-down"),
        Some(_) => ("→ 0%".into(), "muted"),
        None => ("—".into(), "muted"),
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let tab = match q.get("tab") {
        Some("flea") => "flea",
        Some("my") => "my",
        _ => "curated",
    };
    let search = q.text("q").unwrap_or_default();
    let sort = q
        .text("sort")
        .filter(|s| SORTS.iter().any(|(k, _)| k == s))
        .unwrap_or_else(|| "recent".into());
    let page = q.page() as u64;
    let market_tab = match tab {
        "flea" => MarketTab::Flea,
        "my" => MarketTab::Mine(session.caller.user.id.clone()),
        _ => MarketTab::Curated,
    };
    let listed = match sort_of(Some(&sort)) {
        Ok(order) => {
            state
                .marketplace
                .items(&ItemsQuery {
                    tab: market_tab,
                    q: (!search.is_empty()).then(|| search.clone()),
                    category: None,
                    item_type: None,
                    sort: order,
                    offset: (page - 1) * PAGE_ITEMS,
                    limit: PAGE_ITEMS,
                })
                .await
        }
        Err(e) => Err(e),
    };
    let listed = match listed {
        Ok(l) => l,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let here = |page: u64| {
        format!(
            "/marketplace?tab={tab}&q={}&sort={sort}&page={page}",
            urlencode(&search)
        )
    };
    let items = listed
        .items
        .iter()
        .map(|i| {
            let (trend, trend_class) = trend(i.trend_pct);
            MarketCard {
                href: format!(
                    "/marketplace/item?source={}&id={}",
                    urlencode(&i.source),
                    urlencode(&i.id)
                ),
                name: i.name.clone(),
                kind: i.item_type.clone(),
                category: i.category.clone(),
                status: i.status.clone().filter(|s| s != "approved"),
                description: i.description.clone().unwrap_or_default(),
                invocations: i.invocations_30d,
                users: i.unique_users_30d,
                trend,
                trend_class,
            }
        })
        .collect();
    let tabs = [
        ("curated", "Curated"),
        ("flea", "Flea market"),
        ("my", "My submissions"),
    ]
    .into_iter()
    .map(|(k, l)| Tab {
        href: format!("/marketplace?tab={k}"),
        label: l.into(),
        current: k == tab,
    })
    .collect();
    respond::page(&MarketplacePage {
        chrome: session.chrome(&state, Page::Marketplace, "Marketplace"),
        tab: tab.into(),
        tabs,
        q: search.clone(),
        sorts: SORTS
            .iter()
            .map(|(k, l)| Choice::new(*k, *l, &sort))
            .collect(),
        api_url: format!(
            "/api/marketplace/items?tab={tab}&q={}&sort={sort}&page={page}",
            urlencode(&search)
        ),
        total: listed.total,
        items,
        prev_page: (page > 1).then(|| here(page - 1)),
        next_page: (page * PAGE_ITEMS < listed.total as u64).then(|| here(page + 1)),
    })
}

#[handler]
pub async fn item(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let id = q.get("id").unwrap_or_default().to_owned();
    let (found, api_url) = if q.get("source") == Some("flea") {
        (
            state.marketplace.flea_entity(&session.caller, &id).await,
            format!("/api/marketplace/flea/{}", urlencode(&id)),
        )
    } else {
        let path = id
            .split_once('/')
            .map(|(m, p)| format!("{}/{}", urlencode(m), urlencode(p)))
            .unwrap_or_default();
        (
            state.marketplace.plugin(&id).await,
            format!("/api/marketplace/plugins/{path}"),
        )
    };
    let v = match found {
        Ok(v) => v,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let usage = &v["telemetry"];
    let series: Vec<(String, i64)> = usage["daily_series"]
        .as_array()
        .map(|days| {
            days.iter()
                .map(|d| {
                    (
                        d["day"].as_str().unwrap_or_default().to_owned(),
                        d["invocations"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let (trend, trend_class) = trend(usage["trend_pct"].as_f64());
    // `{plugin: …}` or `{entity: …}` beside the usage.
    let it = if v["plugin"].is_object() {
        &v["plugin"]
    } else {
        &v["entity"]
    };
    let text = |k: &str| it[k].as_str().unwrap_or_default().to_owned();
    respond::page(&MarketItemPage {
        chrome: session.chrome(&state, Page::Marketplace, &text("name")),
        name: text("name"),
        description: text("description"),
        invocations: usage["invocations_30d"].as_i64().unwrap_or(0),
        users: usage["unique_users_30d"].as_i64().unwrap_or(0),
        trend,
        trend_class,
        api_url,
        max: series.iter().map(|d| d.1).max().unwrap_or(0).max(1),
        series,
    })
}
