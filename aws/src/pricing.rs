//! On-demand prices from the AWS Pricing API (`GetProducts`), as upstream reads them.
//!
//! Two queries per refresh: shared-tenancy `Compute Instance` products and dedicated
//! `Compute Instance (bare metal)` ones, each filtered to the region, Linux, no pre-installed
//! software, capacity status `Used` and the OnDemand market. Each price-list item is a JSON
//! document; the price is the first non-zero `pricePerUnit` (USD, or CNY in China) among its
//! OnDemand terms. An answer with no price at all counts as a failure, so a broken or empty
//! answer never replaces prices that work.
//!
//! The Pricing API lives in a few regions only: us-east-1, with ap-south-1, eu-central-1 and
//! cn-northwest-1 serving the ap-, eu- and cn- regions ([`endpoint_region`]). GovCloud has
//! none ([`has_pricing_api`]); there, and with `--isolated-vpc`, the embedded table is all
//! there is.

use std::collections::HashMap;

use aws_sdk_pricing::types::{Filter, FilterType};

use crate::error::AwsError;

/// Pages at most per query (100 items each): EC2's Linux on-demand list is ~1,000 items a
/// region, so this bounds a misbehaving paginator, not a real answer.
const MAX_PAGES: usize = 200;

/// The region whose Pricing API endpoint serves `region`.
pub fn endpoint_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else {
        "us-east-1"
    }
}

/// Whether `region` can be priced through the Pricing API at all.
pub fn has_pricing_api(region: &str) -> bool {
    !region.starts_with("us-gov-")
}

/// A Pricing API client for one region's prices.
#[derive(Debug, Clone)]
pub struct PricingApi {
    client: aws_sdk_pricing::Client,
    region: String,
}

impl PricingApi {
    /// Prices for `region` through `client` (configured for [`endpoint_region`]).
    pub fn new(client: aws_sdk_pricing::Client, region: &str) -> Self {
        PricingApi {
            client,
            region: region.to_owned(),
        }
    }

    /// The Linux on-demand USD/hour of every instance type the region sells.
    pub async fn on_demand_prices(&self) -> Result<HashMap<String, f64>, AwsError> {
        let mut prices = self.query("Shared", "Compute Instance").await?;
        let metal = self
            .query("Dedicated", "Compute Instance (bare metal)")
            .await?;
        if prices.is_empty() && metal.is_empty() {
            return Err(AwsError::new(
                "GetProducts",
                "NoPrices",
                &format!("no on-demand prices for {}", self.region),
            ));
        }
        prices.extend(metal);
        Ok(prices)
    }

    async fn query(
        &self,
        tenancy: &str,
        product_family: &str,
    ) -> Result<HashMap<String, f64>, AwsError> {
        let term = |field: &str, value: &str| {
            Filter::builder()
                .field(field)
                .r#type(FilterType::TermMatch)
                .value(value)
                .build()
                .map_err(|e| AwsError::new("GetProducts", "InvalidFilter", &e.to_string()))
        };
        let filters = vec![
            term("regionCode", &self.region)?,
            term("serviceCode", "AmazonEC2")?,
            term("preInstalledSw", "NA")?,
            term("operatingSystem", "Linux")?,
            term("capacitystatus", "Used")?,
            term("marketoption", "OnDemand")?,
            term("tenancy", tenancy)?,
            term("productFamily", product_family)?,
        ];
        let currency = if self.region.starts_with("cn-") {
            "CNY"
        } else {
            "USD"
        };
        let mut out = HashMap::new();
        let mut token = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .get_products()
                .service_code("AmazonEC2")
                .set_filters(Some(filters.clone()))
                .max_results(100)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("GetProducts", e))?;
            for item in page.price_list() {
                if let Some((name, price)) = parse_price_item(item, currency) {
                    out.insert(name, price);
                }
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(out);
            }
        }
        Err(AwsError::new(
            "GetProducts",
            "TooManyPages",
            &format!("more than {MAX_PAGES} pages of {product_family} prices"),
        ))
    }
}

/// The instance type and hourly price of one price-list item, or `None` when it names no
/// instance type or has no non-zero price in `currency`.
pub fn parse_price_item(item: &str, currency: &str) -> Option<(String, f64)> {
    let doc: serde_json::Value = serde_json::from_str(item).ok()?;
    let name = doc
        .pointer("/product/attributes/instanceType")?
        .as_str()
        .filter(|n| !n.is_empty())?;
    let terms = doc.pointer("/terms/OnDemand")?.as_object()?;
    let price = terms
        .values()
        .filter_map(|t| t.get("priceDimensions")?.as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|d| d.pointer(&format!("/pricePerUnit/{currency}"))?.as_str())
        .filter_map(|p| p.parse::<f64>().ok())
        .find(|p| *p > 0.0)?;
    Some((name.to_owned(), price))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": name, "regionCode": "eu-west-1"}, "sku": "SKU1"},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"SKU1.JRTCKXETXF": {"priceDimensions": {"SKU1.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}, "sku": "SKU1"}}},
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z"
        })
        .to_string()
    }

    #[test]
    fn a_price_list_item_gives_its_type_and_hourly_price() {
        assert_eq!(
            parse_price_item(&item("m5.large", "0.1070000000"), "USD"),
            Some(("m5.large".to_owned(), 0.107))
        );
        assert_eq!(
            parse_price_item(&item("m5.large", "0.0000000000"), "USD"),
            None
        );
        assert_eq!(parse_price_item(&item("", "0.1"), "USD"), None);
        assert_eq!(parse_price_item(&item("m5.large", "0.1"), "CNY"), None);
        assert_eq!(parse_price_item("not json", "USD"), None);
    }

    #[test]
    fn regions_are_served_by_upstreams_pricing_endpoints() {
        assert_eq!(endpoint_region("us-west-2"), "us-east-1");
        assert_eq!(endpoint_region("eu-west-1"), "eu-central-1");
        assert_eq!(endpoint_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(endpoint_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(endpoint_region("sa-east-1"), "us-east-1");
        assert!(!has_pricing_api("us-gov-west-1"));
        assert!(has_pricing_api("eu-west-1"));
    }
}
